"""gpt-oss's published chat template (tests/fixtures/tokenizers/gptoss/chat_template.jinja)
rendered by `sparkd template` against two references, live:

1. the text transformers' apply_chat_template (jinja2) renders from the same fixture folder,
   for the shared conversations of tests/gen/gen_template_golden.py and the gpt-oss ones
   below (developer and system instructions, reasoning_effort, model_identity, builtin
   tools, function tools, tool calls and results, multi-turn reasoning); where jinja2
   refuses (the template's raise_exception), sparkd must refuse too;
2. the token ids openai-harmony renders for the same conversation, where harmony can say
   it, against `sparkd tokenize` of sparkd's render. The template and harmony differ in a
   few places that come from the template itself; each is listed in TEMPLATE_QUIRKS and
   applied to harmony's text (then encoded by harmony) where a case names it.

No golden file: the template prints today's date (strftime_now), so both sides render now.
"""
import datetime
import json
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "tests" / "gen"))
import gen_harmony_golden as harmony_gen  # noqa: E402
import gen_template_golden as gen  # noqa: E402
from test_template_oracle import BIN, run_template  # noqa: E402

SOURCE = {"kind": "fixture", "path": "tokenizers/gptoss"}
FOLDER = gen.fixtures_dir() / "tokenizers" / "gptoss"
U, A, D, S, T = "user", "assistant", "developer", "system", "tool"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer"}}, "required": ["city"]}}}
UNIT_TOOL = {"type": "function", "function": {
    "name": "convert", "description": "Convert a temperature",
    "parameters": {"type": "object", "properties": {
        "value": {"type": "number"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}, "required": ["value"]}}}
RICH_TOOL = {"type": "function", "function": {
    "name": "plan_trip", "description": "Plan a trip",
    "parameters": {"type": "object", "properties": {
        "stops": {"type": "array", "items": {"type": "string"}, "description": "Cities in order"},
        "nights": {"type": "array", "items": {"type": "integer"}},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "legs": {"type": "array", "items": {"type": "object", "properties": {"from": {"type": "string"}}}},
        "budget": {"type": ["number", "null"]},
        "note": {"type": "string", "nullable": True},
        "mode": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "prefs": {"type": "object", "properties": {"window": {"type": "boolean"}, "meal": {"type": "string"}},
                  "required": ["window"]},
        "anything": {},
        "rooms": {"type": "integer", "default": 1}}, "required": ["stops"]}}}
NO_ARGS_TOOL = {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {}}}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(content):
    return {"role": T, "content": content}


# The places where the template's text differs from harmony's renderer for the same
# conversation, each explained by the template's own code; apply_quirks rewrites harmony's
# text accordingly for the cases that name them.
TEMPLATE_QUIRKS = {
    "tool_result_tojson": "the template writes a tool message's content through |tojson, so a result string "
                          "arrives JSON-quoted; harmony writes the result text as it is",
    "enum_default_comma": "after an enum parameter's default the template writes the ',\\n' every parameter gets; "
                          "harmony ends that line at the default",
    "instructions_blank_line": "without tools the template still ends the developer instructions with '\\n\\n' "
                               "(the separator before '# Tools'); harmony ends them at the text",
}


def gptoss_conversations():
    """(id, request, harmony spec or None). A harmony spec: system options, developer
    instructions, function tools, the messages after them, the render mode, and the quirks
    that apply."""
    out = []

    def add(cid, request, harmony=None):
        out.append((cid, request, harmony))

    def h(messages, instructions=None, tools=None, effort="medium", mode="completion", quirks=(), **system):
        return dict(messages=messages, instructions=instructions, tools=tools, effort=effort, mode=mode,
                    quirks=list(quirks), system=system)

    add("user_only", {"messages": [{"role": U, "content": "Hello!"}], "add_generation_prompt": True},
        h([(U, "Hello!")]))
    for effort in ("low", "medium", "high"):
        add(f"effort_{effort}", {"messages": [{"role": U, "content": "Think."}], "add_generation_prompt": True,
                                 "reasoning_effort": effort}, h([(U, "Think.")], effort=effort))
    add("developer_first", {"messages": [{"role": D, "content": "Answer in French."}, {"role": U, "content": "Hi"}],
                            "add_generation_prompt": True, "reasoning_effort": "low"},
        h([(U, "Hi")], instructions="Answer in French.", effort="low", quirks=["instructions_blank_line"]))
    add("system_as_developer", {"messages": [{"role": S, "content": "Be terse."}, {"role": U, "content": "2+2?"}],
                                "add_generation_prompt": True}, h([(U, "2+2?")], instructions="Be terse.", quirks=["instructions_blank_line"]))
    add("model_identity", {"messages": [{"role": U, "content": "Who are you?"}], "add_generation_prompt": True,
                           "model_identity": "You are a test model."},
        h([(U, "Who are you?")], model_identity="You are a test model."))
    add("multi_turn_reasoning_dropped",
        {"messages": [{"role": U, "content": "Q1"}, {"role": A, "content": "A1", "thinking": "R1"},
                      {"role": U, "content": "Q2"}], "add_generation_prompt": True},
        h([(U, "Q1"), (A, "final", "A1"), (U, "Q2")]))
    add("final_turn_with_reasoning",
        {"messages": [{"role": U, "content": "3*7?"}, {"role": A, "content": "21", "thinking": "three sevens"}],
         "add_generation_prompt": False},
        h([(U, "3*7?"), (A, "analysis", "three sevens"), (A, "final", "21")], mode="training"))
    add("final_turn_without_reasoning",
        {"messages": [{"role": U, "content": "Hi"}, {"role": A, "content": "Hello."}], "add_generation_prompt": False},
        h([(U, "Hi"), (A, "final", "Hello.")], mode="training"))
    add("tools_listed", {"messages": [{"role": U, "content": "Weather in Paris?"}], "tools": [WEATHER],
                         "add_generation_prompt": True},
        h([(U, "Weather in Paris?")], tools=[WEATHER]))
    add("tools_with_instructions",
        {"messages": [{"role": D, "content": "Use tools."}, {"role": U, "content": "Weather?"}],
         "tools": [WEATHER, NO_ARGS_TOOL], "add_generation_prompt": True, "reasoning_effort": "high"},
        h([(U, "Weather?")], instructions="Use tools.", tools=[WEATHER, NO_ARGS_TOOL], effort="high"))
    add("tool_enum_default", {"messages": [{"role": U, "content": "Convert 20"}], "tools": [UNIT_TOOL],
                              "add_generation_prompt": True},
        h([(U, "Convert 20")], tools=[UNIT_TOOL], quirks=["enum_default_comma"]))
    add("tool_call_and_result",
        {"messages": [{"role": U, "content": "Weather in Paris?"},
                      {"role": A, "thinking": "use the tool", "tool_calls": [call("get_weather", {"city": "Paris"})]},
                      tool_result("sunny")], "tools": [WEATHER], "add_generation_prompt": True},
        h([(U, "Weather in Paris?"), (A, "analysis", "use the tool"), ("call", "get_weather", '{"city": "Paris"}'),
           ("result", "get_weather", "sunny")], tools=[WEATHER], quirks=["tool_result_tojson"]))
    add("tool_call_content_as_analysis",
        {"messages": [{"role": U, "content": "Weather in Oslo?"},
                      {"role": A, "content": "Checking.", "tool_calls": [call("get_weather", {"city": "Oslo", "days": 2})]},
                      tool_result("{\"temp\": -3}")], "tools": [WEATHER], "add_generation_prompt": True},
        h([(U, "Weather in Oslo?"), (A, "analysis", "Checking."), ("call", "get_weather", '{"city": "Oslo", "days": 2}'),
           ("result", "get_weather", '{"temp": -3}')], tools=[WEATHER], quirks=["tool_result_tojson"]))
    add("tool_round_then_answer",
        {"messages": [{"role": D, "content": "Agent."}, {"role": U, "content": "Weather in Rome?"},
                      {"role": A, "thinking": "call it", "tool_calls": [call("get_weather", {"city": "Rome"})]},
                      tool_result("hot"), {"role": A, "content": "It is hot in Rome."},
                      {"role": U, "content": "Thanks"}], "tools": [WEATHER], "add_generation_prompt": True},
        h([(U, "Weather in Rome?"), ("call", "get_weather", '{"city": "Rome"}'), ("result", "get_weather", "hot"),
           (A, "final", "It is hot in Rome."), (U, "Thanks")], instructions="Agent.", tools=[WEATHER],
          quirks=["tool_result_tojson"]))
    add("unicode", {"messages": [{"role": U, "content": "héllo — 你好 👍🏽 <b>&amp;</b>"}], "add_generation_prompt": True},
        h([(U, "héllo — 你好 👍🏽 <b>&amp;</b>")]))
    # Rendered by both Jinja engines only (harmony has no equivalent, or the template refuses).
    add("rich_tool_types", {"messages": [{"role": U, "content": "Plan"}], "tools": [RICH_TOOL, UNIT_TOOL],
                            "add_generation_prompt": True})
    add("builtin_browser", {"messages": [{"role": U, "content": "Search"}], "add_generation_prompt": True,
                            "builtin_tools": ["browser"]})
    add("builtin_python_and_tools", {"messages": [{"role": U, "content": "Run"}], "add_generation_prompt": True,
                                     "builtin_tools": ["python", "browser"], "tools": [WEATHER]})
    add("tool_call_arguments_string",
        {"messages": [{"role": U, "content": "Weather?"},
                      {"role": A, "content": None, "tool_calls": [call("get_weather", "{\"city\": \"Lima\"}")]},
                      tool_result("warm")], "tools": [WEATHER], "add_generation_prompt": True})
    add("two_calls_first_rendered",
        {"messages": [{"role": U, "content": "Both?"},
                      {"role": A, "tool_calls": [call("get_weather", {"city": "A"}), call("get_weather", {"city": "B"})]},
                      tool_result("a"), tool_result("b")], "tools": [WEATHER], "add_generation_prompt": True})
    add("channel_tags_in_content_refused",
        {"messages": [{"role": U, "content": "x"}, {"role": A, "content": "<|channel|>final<|message|>hi"}],
         "add_generation_prompt": True})
    add("content_and_thinking_with_call_refused",
        {"messages": [{"role": U, "content": "x"},
                      {"role": A, "content": "c", "thinking": "t", "tool_calls": [call("now", {})]}],
         "tools": [NO_ARGS_TOOL], "add_generation_prompt": True})
    add("empty_developer_with_tools", {"messages": [{"role": D, "content": ""}, {"role": U, "content": "Hi"}],
                                       "tools": [NO_ARGS_TOOL], "add_generation_prompt": True})
    return out


def all_requests():
    return [("shared_%02d" % i, r) for i, r in enumerate(gen.conversations())] + \
           [(cid, r) for cid, r, _ in gptoss_conversations()]


def test_fixture_template_is_the_published_one():
    text = (FOLDER / "chat_template.jinja").read_text(encoding="utf-8")
    assert text.startswith("{#-\n  In addition to the normal inputs of `messages` and `tools`")
    assert "<|start|>assistant to=" in text and 'strftime_now("%Y-%m-%d")' in text


def test_sparkd_renders_as_jinja2():
    same, refused, mismatches = 0, 0, []
    for cid, request in all_requests():
        proc = run_template(FOLDER, request)
        status, expected = gen.reference(SOURCE, request)
        if status == "ok":
            got = proc.stdout.decode("utf-8", errors="replace")
            if proc.returncode == 0 and got == expected:
                same += 1
            else:
                mismatches.append((cid, proc.stderr.decode()[-300:], expected[-300:], got[-300:]))
        elif proc.returncode == 2 and proc.stderr:
            refused += 1
        else:
            mismatches.append((cid, "jinja2 refused: " + expected, "", proc.stdout.decode()[-300:]))
    assert not mismatches, f"{len(mismatches)} differ from jinja2, first: {mismatches[0]}"
    assert same >= 30 and refused >= 2, (same, refused)
    print(f"gpt-oss template: {same} renders identical to jinja2, {refused} refused like jinja2")


def sparkd_ids(texts):
    lines = "".join(json.dumps({"text": t, "add_special_tokens": False}) + "\n" for t in texts)
    proc = subprocess.run([BIN, "tokenize", "--model", str(FOLDER)], input=lines.encode(), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line)["ids"] for line in proc.stdout.decode().splitlines()]


def harmony_render(enc, spec):
    """(token ids, text) of harmony's render of `spec` (gptoss_conversations' h())."""
    from openai_harmony import (Author, Conversation, DeveloperContent, Message, ReasoningEffort,
                                RenderConversationConfig, Role, SystemContent, ToolDescription)

    system = (SystemContent.new().with_reasoning_effort(ReasoningEffort(spec["effort"].capitalize()))
              .with_knowledge_cutoff("2024-06").with_conversation_start_date(datetime.date.today().isoformat()))
    if "model_identity" in spec["system"]:
        system = system.with_model_identity(spec["system"]["model_identity"])
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    if spec["instructions"] or spec["tools"]:
        dev = DeveloperContent.new()
        if spec["instructions"]:
            dev = dev.with_instructions(spec["instructions"])
        if spec["tools"]:
            dev = dev.with_function_tools([ToolDescription.new(t["function"]["name"], t["function"]["description"],
                                                               parameters=t["function"]["parameters"] or None)
                                           for t in spec["tools"]])
        messages.append(Message.from_role_and_content(Role.DEVELOPER, dev))
    for m in spec["messages"]:
        if m[0] == U:
            messages.append(Message.from_role_and_content(Role.USER, m[1]))
        elif m[0] == A:
            messages.append(Message.from_role_and_content(Role.ASSISTANT, m[2]).with_channel(m[1]))
        elif m[0] == "call":
            messages.append(Message.from_role_and_content(Role.ASSISTANT, m[2]).with_channel("commentary")
                            .with_recipient("functions." + m[1]).with_content_type("json"))
        else:
            messages.append(Message.from_author_and_content(Author.new(Role.TOOL, "functions." + m[1]), m[2])
                            .with_recipient("assistant").with_channel("commentary"))
    conversation = Conversation.from_messages(messages)
    if spec["mode"] == "training":  # the final turn's analysis kept, as the template keeps it there
        ids = enc.render_conversation_for_training(conversation, RenderConversationConfig(auto_drop_analysis=False))
    else:
        ids = enc.render_conversation_for_completion(conversation, Role.ASSISTANT)
    return list(ids), enc.decode(ids)


def apply_quirks(text, spec):
    """Harmony's text as the template writes the same conversation (TEMPLATE_QUIRKS)."""
    def replace(old, new):
        assert old in text, (old, text)
        return text.replace(old, new)

    for name in spec["quirks"]:
        assert name in TEMPLATE_QUIRKS, name
        if name == "tool_result_tojson":
            for m in spec["messages"]:
                if m[0] == "result":
                    text = replace(f"<|message|>{m[2]}<|end|>", f"<|message|>{json.dumps(m[2])}<|end|>")
        elif name == "enum_default_comma":
            text = replace(", // default: c\n", ", // default: c,\n")
        elif name == "instructions_blank_line":
            text = replace(f"{spec['instructions']}<|end|>", f"{spec['instructions']}\n\n<|end|>")
    return text


def test_token_ids_equal_openai_harmony():
    enc = harmony_gen.encoding()
    cases = [(cid, request, spec) for cid, request, spec in gptoss_conversations() if spec]
    texts = []
    for cid, request, _ in cases:
        proc = run_template(FOLDER, request)
        assert proc.returncode == 0, (cid, proc.stderr)
        texts.append(proc.stdout.decode("utf-8"))
    exact, with_quirks, mismatches = 0, 0, []
    for (cid, _, spec), text, ids in zip(cases, texts, sparkd_ids(texts)):
        want, harmony_text = harmony_render(enc, spec)
        if spec["quirks"]:
            want = enc.encode(apply_quirks(harmony_text, spec), allowed_special="all")
        if ids == want:
            exact += not spec["quirks"]
            with_quirks += bool(spec["quirks"])
        else:
            mismatches.append((cid, text[-300:], enc.decode(want)[-300:]))
    assert not mismatches, f"{len(mismatches)} differ from openai-harmony, first: {mismatches[0]}"
    assert exact >= 10
    print(f"openai-harmony: {exact} conversations token for token, {with_quirks} after the template's quirks")
