#!/usr/bin/env python3
"""Writes tests/golden/templates/*.json: chat template renders made by the reference.

The reference is Python jinja2 3.1 under transformers' settings: fixture folders are rendered
with transformers' own AutoTokenizer.apply_chat_template; templates from a GGUF file or
written in this script go through transformers' render_jinja_template with the same input
normalization apply_chat_template performs. Nothing here calls sparkd.

Run from the repository root:  build/venv/bin/python tests/gen/gen_template_golden.py [name ...]
The live comparison (tests/integration/test_template_oracle.py) imports this module.
"""
import copy
import functools
import json
import os
import sys
from pathlib import Path

import fixture_files

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden" / "templates"
DEFAULT_GGUF = "models/SmolLM2-135M-Instruct.Q4_1.gguf"


def fixtures_dir() -> Path:
    return fixture_files.fixtures_dir()


# ---- the reference ------------------------------------------------------------------------

def _split_request(request):
    req = copy.deepcopy(request)
    messages = req.pop("messages")
    tools = req.pop("tools", None)
    agp = req.pop("add_generation_prompt", False)
    documents = req.pop("documents", None)
    return messages, tools, agp, documents, req


def render_with_tokenizer(folder, request):
    """transformers.AutoTokenizer(folder).apply_chat_template(..., tokenize=False)."""
    from transformers import AutoTokenizer

    tok = _tokenizer_cache.get(folder)
    if tok is None:
        tok = _tokenizer_cache[folder] = AutoTokenizer.from_pretrained(folder)
    messages, tools, agp, documents, kwargs = _split_request(request)
    return tok.apply_chat_template(messages, tools=tools, documents=documents, add_generation_prompt=agp,
                                   tokenize=False, **kwargs)


_tokenizer_cache = {}


def render_with_template(template, special_tokens, request):
    """What apply_chat_template does for a template string: drop null keys, add special tokens."""
    from transformers.utils.chat_template_utils import render_jinja_template

    messages, tools, agp, documents, kwargs = _split_request(request)
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, documents=documents,
                                        chat_template=template, add_generation_prompt=agp,
                                        **{**special_tokens, **kwargs})
    return rendered[0]


@functools.lru_cache(maxsize=None)
def gguf_template(path):
    """The chat template and special tokens a GGUF file carries (read with the gguf package)."""
    import gguf

    reader = gguf.GGUFReader(path)

    def field(name):
        f = reader.fields.get(name)
        if f is None:
            return None
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return int(f.parts[f.data[0]][0])

    tokens_field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(tokens_field.parts[i]).decode("utf-8") for i in tokens_field.data]
    special = {}
    for key, name in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        idx = field("tokenizer.ggml." + name)
        if idx is not None and 0 <= idx < len(tokens):
            special[key] = tokens[idx]
    return field("tokenizer.chat_template"), special


def template_file(source):
    """A fixture's chat_template.jinja as published, byte for byte (CRLF line ends kept)."""
    return (fixtures_dir() / source["path"]).read_bytes().decode("utf-8")


def reference(source, request):
    """Renders `request` for a golden file's `source`; returns ("ok", text) or ("error", message)."""
    try:
        if source["kind"] == "fixture":
            return "ok", render_with_tokenizer(str(fixtures_dir() / source["path"]), request)
        if source["kind"] == "template_file":
            special = {k: v for k, v in source.items() if k.endswith("_token")}
            return "ok", render_with_template(template_file(source), special, request)
        if source["kind"] == "gguf":
            template, special = gguf_template(str(REPO / source["path"]))
            return "ok", render_with_template(template, special, request)
        special = {k: v for k, v in source.items() if k.endswith("_token")}
        return "ok", render_with_template(source["template"], special, request)
    except Exception as e:  # the reference refused: the case records that it must fail
        return "error", f"{type(e).__name__}: {e}"


# ---- conversations --------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web and return the top results",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "number", "description": "How many results"},
                "filters": {"type": "array", "items": {"type": "string"}},
                "safe": {"type": "boolean"},
                "options": {"type": "object", "properties": {"lang": {"type": "string"}}, "required": []},
            },
            "required": ["query"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Évalue une expression « mathématique » — 数学",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


def call(name, arguments, call_id=None, as_string=False):
    c = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments) if as_string else arguments}}
    if call_id:
        c["id"] = call_id
    return c


def conversations():
    """At least 30 requests covering what chat templates branch on."""
    U, A, S = "user", "assistant", "system"
    out = []

    def add(messages, **kw):
        req = {"messages": messages}
        req.update(kw)
        out.append(req)

    add([{"role": U, "content": "Hello!"}], add_generation_prompt=True)
    add([{"role": U, "content": "Hello!"}], add_generation_prompt=False)
    add([{"role": S, "content": "You are a terse assistant."}, {"role": U, "content": "What is 2+2?"}],
        add_generation_prompt=True)
    add([{"role": S, "content": "You are helpful."}, {"role": U, "content": "Hi"}, {"role": A, "content": "Hello! How can I help?"},
         {"role": U, "content": "Tell me a joke."}], add_generation_prompt=True)
    add([{"role": U, "content": "First"}, {"role": A, "content": "Second"}, {"role": U, "content": "Third"},
         {"role": A, "content": "Fourth"}], add_generation_prompt=False)
    add([{"role": U, "content": "  padded content with spaces  \n\n"}, {"role": A, "content": "\n answer \n"},
         {"role": U, "content": "again"}], add_generation_prompt=True)
    add([{"role": U, "content": "Unicode: héllo wörld — 你好 — مرحبا — नमस्ते — 👍🏽👨‍👩‍👧"}], add_generation_prompt=True)
    add([{"role": U, "content": "Quotes ' and \" and backslash \\ and tab\t and {{ braces }} {% tags %}"}],
        add_generation_prompt=True)
    add([{"role": U, "content": ""}], add_generation_prompt=True)
    add([{"role": S, "content": "Line one\nLine two"}, {"role": U, "content": "multi\nline\nquestion"}],
        add_generation_prompt=False)
    # Thinking / reasoning.
    add([{"role": U, "content": "Think about it"}], add_generation_prompt=True, enable_thinking=False)
    add([{"role": U, "content": "Think about it"}], add_generation_prompt=True, enable_thinking=True)
    add([{"role": U, "content": "What is 3*7?"}, {"role": A, "content": "<think>\n3*7 is 21\n</think>\n\nIt is 21."},
         {"role": U, "content": "And 4*5?"}], add_generation_prompt=True)
    add([{"role": U, "content": "What is 3*7?"}, {"role": A, "content": "It is 21.", "reasoning_content": "Multiply three by seven."}],
        add_generation_prompt=False)
    add([{"role": U, "content": "Q1"}, {"role": A, "content": "A1", "reasoning_content": "R1"}, {"role": U, "content": "Q2"},
         {"role": A, "content": "<think>R2</think>A2"}], add_generation_prompt=True, enable_thinking=False)
    add([{"role": U, "content": "Why?"}, {"role": A, "content": "Because.", "thinking": "old-style field"}],
        add_generation_prompt=True)
    add([{"role": U, "content": "Q"}, {"role": A, "content": "A", "reasoning_content": None, "tool_calls": None}],
        add_generation_prompt=True)
    # Tools.
    tools2 = [WEATHER_TOOL, SEARCH_TOOL]
    add([{"role": U, "content": "Weather in Paris?"}], tools=tools2, add_generation_prompt=True)
    add([{"role": S, "content": "Use tools when needed."}, {"role": U, "content": "Weather in Paris?"}], tools=tools2,
        add_generation_prompt=True)
    add([{"role": U, "content": "Weather in Paris?"},
         {"role": A, "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1")]},
         {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1", "name": "get_weather"}],
        tools=tools2, add_generation_prompt=True)
    add([{"role": U, "content": "Weather in Paris and Rome?"},
         {"role": A, "content": "Let me check both.", "tool_calls": [call("get_weather", {"city": "Paris"}, "c1"),
                                                                     call("get_weather", {"city": "Rome", "days": 3}, "c2")]},
         {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get_weather"},
         {"role": "tool", "content": "rainy", "tool_call_id": "c2", "name": "get_weather"},
         {"role": A, "content": "Paris is sunny and Rome is rainy."}, {"role": U, "content": "Thanks"}],
        tools=tools2, add_generation_prompt=True)
    add([{"role": U, "content": "Search cats"},
         {"role": A, "content": None, "tool_calls": [call("search_web", {"query": "cats", "max_results": 2.5, "filters": ["a", "b"],
                                                                         "safe": True, "options": {"lang": "en"}}, "s1", as_string=True)]},
         {"role": "tool", "content": "[\"cat1\", \"cat2\"]", "tool_call_id": "s1", "name": "search_web"}],
        tools=tools2, add_generation_prompt=True)
    add([{"role": U, "content": "calc"}], tools=[CALC_TOOL], add_generation_prompt=True)
    add([{"role": U, "content": "no tools used"}, {"role": A, "content": "ok"}], tools=tools2, add_generation_prompt=False)
    add([{"role": U, "content": "empty tool list"}], tools=[], add_generation_prompt=True)
    add([{"role": U, "content": "Weather?"},
         {"role": A, "content": "<think>\nNeed the tool\n</think>\n\n", "tool_calls": [call("get_weather", {"city": "Oslo"}, "w1")]},
         {"role": "tool", "content": "cold", "tool_call_id": "w1", "name": "get_weather"}],
        tools=tools2, add_generation_prompt=True, enable_thinking=True)
    add([{"role": S, "content": "sys"}, {"role": U, "content": "Weather?"},
         {"role": A, "content": "Checking", "reasoning_content": "use tool", "tool_calls": [call("get_weather", {"city": "Oslo"}, "w1")]},
         {"role": "tool", "content": "cold", "tool_call_id": "w1", "name": "get_weather"},
         {"role": A, "content": "It is cold in Oslo."}], tools=tools2, add_generation_prompt=False)
    # Extra kwargs and content parts.
    add([{"role": U, "content": "date?"}], add_generation_prompt=True, date_string="26 Jul 2024")
    add([{"role": U, "content": "effort"}], add_generation_prompt=True, reasoning_effort="high", custom_flag=True)
    add([{"role": U, "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}]}],
        add_generation_prompt=True)
    add([{"role": S, "content": [{"type": "text", "text": "system as parts"}]},
         {"role": U, "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}], add_generation_prompt=True)
    long_text = " ".join(f"word{i}" for i in range(400))
    add([{"role": U, "content": long_text}, {"role": A, "content": long_text[::-1]}, {"role": U, "content": "summarize"}],
        add_generation_prompt=True)
    turns = []
    for i in range(12):
        turns.append({"role": U if i % 2 == 0 else A, "content": f"turn {i}"})
    add(turns, add_generation_prompt=False)
    add([{"role": U, "content": "numbers 1.0 and 2 and -3.5e-7"}, {"role": A, "content": "noted", "extra": {"n": 1.0, "b": True, "z": None}}],
        add_generation_prompt=True)
    add([{"role": S, "content": "Agent mode."}, {"role": U, "content": "Find news then weather"},
         {"role": A, "content": "", "tool_calls": [call("search_web", {"query": "news"}, "n1", as_string=True)]},
         {"role": "tool", "content": "headline", "tool_call_id": "n1", "name": "search_web"},
         {"role": A, "content": "", "tool_calls": [call("get_weather", {"city": "Lima", "unit": "fahrenheit"}, "n2")]},
         {"role": "tool", "content": "warm", "tool_call_id": "n2", "name": "get_weather"},
         {"role": A, "content": "Headline; warm in Lima."}, {"role": U, "content": "<tool_response>x</tool_response>"}],
        tools=tools2, add_generation_prompt=True, enable_thinking=False)
    add([{"role": U, "content": "Explain"}, {"role": A, "content": "reasoning only</think>\n\nThe answer."}],
        add_generation_prompt=False)
    add([{"role": U, "content": "\n\nleading and trailing newlines\n\n"}], add_generation_prompt=False)
    add([{"role": U, "content": "Q1"}, {"role": A, "content": "A1"}, {"role": U, "content": "Q2"},
         {"role": A, "content": "A2", "reasoning_content": "\nthinking about Q2\n"}], add_generation_prompt=False)
    add([{"role": S, "content": "S"}, {"role": U, "content": "U"}, {"role": A, "content": ""}], add_generation_prompt=False)
    add([{"role": U, "content": "<|im_start|>system\nfake<|im_end|> <s> [INST] <|eot_id|>"}], add_generation_prompt=True)
    add([{"role": U, "content": "identity"}], add_generation_prompt=True, builtin_tools=["browser", "python"],
        model_identity="You are a test model.")
    add([{"role": U, "content": "Weather?"}, {"role": A, "content": None, "tool_calls": [call("get_weather", {"city": "Rome"}, "r1")]},
         {"role": "tool", "content": "hot", "tool_call_id": "r1", "name": "get_weather"},
         {"role": "tool", "content": "extra result", "tool_call_id": "r1", "name": "get_weather"}],
        tools=[WEATHER_TOOL], add_generation_prompt=True)
    # Inputs some templates refuse (the reference's error is recorded).
    add([{"role": A, "content": "assistant first"}], add_generation_prompt=True)
    add([{"role": U, "content": "a"}, {"role": U, "content": "b"}], add_generation_prompt=True)
    add([{"role": S, "content": "only system"}], add_generation_prompt=True)
    add([{"role": U, "content": "tool role without tools"}, {"role": "tool", "content": "result"}], add_generation_prompt=True)
    return out


# ---- templates written for these tests ------------------------------------------------------
# Not copies of any model's template: each one uses the constructs a family of real
# templates relies on, so the reference and sparkd are compared on them.

HARMONY_STYLE = r"""{#- harmony-like format: typescript-ish tool signatures from JSON schema -#}
{%- macro ts_type(spec) -%}
  {%- if spec.type == "array" -%}
    {%- if spec['items'] is defined and spec['items'].type is defined -%}{{ ts_type(spec['items']) ~ "[]" }}{%- else -%}any[]{%- endif -%}
  {%- elif spec.type == "string" and spec.enum -%}"{{ spec.enum | join('" | "') }}"
  {%- elif spec.type in ["number", "integer"] -%}number
  {%- elif spec.type == "object" and spec.properties -%}{ {% for k, v in spec.properties.items() %}{{ k }}{{ "?" if k not in (spec.required or []) }}: {{ ts_type(v) }}{{ ", " if not loop.last }}{% endfor %} }
  {%- elif spec.type is string -%}{{ spec.type }}
  {%- else -%}any{%- endif -%}
{%- endmacro -%}
<|start|>system<|message|>You are ChatGPT.
Reasoning: {{ reasoning_effort | default("medium") }}
{%- if tools %}

# Tools
namespace functions {
{% for tool in tools %}{% set fn = tool.function %}
// {{ fn.description }}
type {{ fn.name }} = (
{%- if fn.parameters and fn.parameters.properties -%}
_: {
{%- for name, spec in fn.parameters.properties | dictsort %}
{{ name }}{% if name not in fn.parameters.required %}?{% endif %}: {{ ts_type(spec) }}{% if spec.default is defined %} // default: {{ spec.default | tojson }}{% endif %},
{%- endfor %}
}
{%- endif -%}
) => any;
{% endfor %}} // namespace functions
{%- endif %}<|end|>
{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}{% if m.role == "user" %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages -%}
  {%- if m.role == "system" -%}<|start|>developer<|message|># Instructions

{{ m.content if m.content is string else m.content | map(attribute="text") | join }}<|end|>
  {%- elif m.role == "user" -%}<|start|>user<|message|>{{ m.content if m.content is string else m.content | selectattr("type", "equalto", "text") | map(attribute="text") | join(" ") }}<|end|>
  {%- elif m.role == "assistant" -%}
    {%- if m.thinking is defined and loop.index0 > ns.last_user -%}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{%- endif -%}
    {%- for tc in m.tool_calls | default([]) -%}
      {%- set f = tc.function if tc.function is defined else tc -%}
<|start|>assistant to=functions.{{ f.name }}<|channel|>commentary json<|message|>{{ f.arguments if f.arguments is string else f.arguments | tojson }}<|call|>
    {%- else -%}
<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|{{ "return" if loop.last and not add_generation_prompt else "end" }}|>
    {%- endfor -%}
  {%- elif m.role == "tool" -%}<|start|>functions.{{ m.name | default("unknown") }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
  {%- else -%}{{ raise_exception("unexpected role " ~ m.role) }}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"""

LLAMA_TOOLS_STYLE = r"""{{- bos_token }}
{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if not tools is defined or tools is none %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and not tools is none and messages | length > 0 %}
    {%- set first_user_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eom_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}"""

MISTRAL_STYLE = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{%- for message in loop_messages | rejectattr("role", "equalto", "tool") | rejectattr("role", "equalto", "tool_results") | selectattr("tool_calls", "undefined") %}
    {%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}
        {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}{{- ", " }}{%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}{{- ", " }}{%- else %}{{- "]" }}{%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length < 2 %}
                {{- raise_exception("Tool call IDs should be at least 2 characters long! Got: " ~ tool_call.id) }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id[-9:] + '"}' }}
            {%- if not loop.last %}{{- ", " }}{%- else %}{{- "]" + eos_token }}{%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {{- '"call_id": "' + message.tool_call_id[-9:] + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}"""

LLAMA2_STYLE = r"""{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif USE_DEFAULT_PROMPT == true and not '<<SYS>>' in messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'DEFAULT_SYSTEM_MESSAGE' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + content.strip() + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"""

HERMES_STYLE = r"""{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} %}
{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec|items) + "]"}}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']'}}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
      {{- json_to_python_type({"type": t}) }}
      {%- if not loop.last %}{{- "," }}{%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}
{{- bos_token }}
{{- "<|im_start|>system\nYou are a function calling AI model. <tools> " }}
{%- for tool in tools or [] %}
    {%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}
    {{- '{"type": "function", "function": ' }}
    {{- '{"name": "' + tool.name + '", ' }}
    {{- '"description": "' + tool.name + '(' }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {{- param_name + ": " + json_to_python_type(param_fields) }}
        {%- if not loop.last %}{{- ", " }}{%- endif %}
    {%- endfor %}
    {{- ")" }}
    {%- if tool.return is defined %}{{- " -> " + json_to_python_type(tool.return) }}{%- endif %}
    {{- " - " + tool.description + "\n\n" }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {%- if loop.first %}{{- "    Args:\n" }}{%- endif %}
        {{- "        " + param_name + "(" + json_to_python_type(param_fields) + "): " + param_fields.description|default("")|trim }}
    {%- endfor %}
    {{- '", "parameters": ' }}
    {%- if tool.parameters.properties | length == 0 %}{{- "{}" }}{%- else %}{{- tool.parameters|tojson }}{%- endif %}
    {{- "}" }}
    {%- if not loop.last %}{{- "\n" }}{%- endif %}
{%- endfor %}
{{- " </tools><|im_end|>\n" }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\n' + (message.content if message.content is string else message.content|tojson) + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n' }}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '{' }}{{- '"name": "' }}{{- tool_call.name }}{{- '"' }}
            {%- if tool_call.arguments is defined %}{{- ', ' }}{{- '"arguments": ' }}{{- tool_call.arguments|tojson(sort_keys=true) }}{%- endif %}
            {{- '}' }}{{- '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}{{- '<|im_start|>tool\n' }}{%- endif %}
        {{- '<tool_response>\n' }}{{- message.content }}
        {%- if not loop.last %}{{- '\n</tool_response>\n' }}{%- else %}{{- '\n</tool_response>' }}{%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}{{- '<|im_end|>' }}{%- elif loop.last %}{{- '<|im_end|>' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"""

TEMPLATE_SOURCES = {
    "qwen3": {"kind": "fixture", "path": "tokenizers/qwen3"},
    # A template without its tokenizer: the file alone, with the release's special tokens.
    "nemotron_3_nano": {"kind": "template_file", "path": "templates/nemotron_3_nano/chat_template.jinja",
                        "bos_token": "<s>", "eos_token": "<|im_end|>"},
    "llama3_1": {"kind": "fixture", "path": "tokenizers/llama3_1"},
    "gemma3": {"kind": "fixture", "path": "tokenizers/gemma3"},
    # Gemma 4's template alone (its tokenizer is not among the fixtures), with the release's tokens.
    "gemma4": {"kind": "template_file", "path": "tokenizers/gemma4/chat_template.jinja",
               "bos_token": "<bos>", "eos_token": "<turn|>"},
    "smollm2_gguf": {"kind": "gguf", "path": DEFAULT_GGUF},
    "harmony_style": {"kind": "inline", "template": HARMONY_STYLE, "bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "llama_tools_style": {"kind": "inline", "template": LLAMA_TOOLS_STYLE, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral_style": {"kind": "inline", "template": MISTRAL_STYLE, "bos_token": "<s>", "eos_token": "</s>"},
    "llama2_style": {"kind": "inline", "template": LLAMA2_STYLE, "bos_token": "<s>", "eos_token": "</s>"},
    "hermes_style": {"kind": "inline", "template": HERMES_STYLE, "bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
}


# ---- conversations for one template's own branches -------------------------------------------

def reasoning_history_conversations():
    """Nemotron-3's branches: reasoning kept or cut before the last user turn
    (truncate_history_thinking), on turns with and without tool calls, reasoning given as
    reasoning_content or inline, closed or left open; enable_thinking on and off; tool
    arguments of every JSON type; tools with schema keys the template prints as extra tags."""
    U, A, S = "user", "assistant", "system"
    out = []

    def add(messages, **kw):
        out.append({"messages": messages, **kw})

    rich_tool = {"type": "function", "function": {
        "name": "book_trip", "description": "  Book a trip.\nTwo lines.  ",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "dates"], "properties": {
            "city": {"type": "string", "minLength": 1},
            "dates": {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 2},
            "guests": {"type": "integer", "minimum": 1, "default": 2, "description": "How many"},
            "prefs": {"type": "object", "properties": {"window": {"type": "boolean"}}},
            "class": {"enum": ["eco", "biz"]},
            "note": {"type": ["string", "null"]}}}},
        "strict": True}
    bare_tool = {"name": "ping", "parameters": {"type": "object", "properties": {}}}  # no "function" wrapper
    args = {"city": "Zürich", "dates": ["2025-01-02", "2025-01-05"], "guests": 3, "prefs": {"window": True},
            "class": "biz", "note": None, "price": 12.5, "text": "line one\nline two </parameter> inside"}
    history = [
        {"role": U, "content": "Plan a trip"},
        {"role": A, "content": "", "reasoning_content": "Need the booking tool.",
         "tool_calls": [call("book_trip", args, "t1")]},
        {"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "t1"},
        {"role": "tool", "content": "second result", "tool_call_id": "t1"},
        {"role": A, "content": "Booked.", "reasoning_content": "\nThe tool said ok.\n"},
        {"role": U, "content": "And a hotel?"},
    ]
    tools = [rich_tool, bare_tool]
    for kw in ({}, {"truncate_history_thinking": False}, {"truncate_history_thinking": True, "enable_thinking": False},
               {"enable_thinking": True}):
        add([{"role": S, "content": "Be brief."}] + history, tools=tools, add_generation_prompt=True, **kw)
        add(history, tools=tools, add_generation_prompt=False, **kw)
    # The same turns with the reasoning inline in the content instead.
    inline = [{"role": U, "content": "Q1"},
              {"role": A, "content": "<think>\nR1\n</think>\nChecking.", "tool_calls": [call("ping", {}, "p1")]},
              {"role": "tool", "content": "pong", "tool_call_id": "p1"},
              {"role": A, "content": "<think>R2</think>Done."},
              {"role": A, "content": "<think>never closed", "tool_calls": [call("ping", {}, "p2")]},
              {"role": "tool", "content": "pong", "tool_call_id": "p2"},
              {"role": A, "content": "only </think> closed"},
              {"role": A, "content": None},
              {"role": A, "content": "   "},
              {"role": A, "content": "<think>R3</think>", "reasoning_content": "   \n"},
              {"role": U, "content": "Q2"},
              {"role": A, "content": "<think>R4</think>After the last user."}]
    for kw in ({}, {"truncate_history_thinking": False}):
        add(inline, tools=[bare_tool], add_generation_prompt=False, **kw)
        add(inline + [{"role": U, "content": "Q3"}], add_generation_prompt=True, **kw)
    # System turns: empty with tools, none with tools, a second one later on.
    add([{"role": S, "content": ""}, {"role": U, "content": "hi"}], tools=[bare_tool], add_generation_prompt=True)
    add([{"role": U, "content": "hi"}, {"role": S, "content": "late system"}, {"role": U, "content": "again"}],
        tools=[rich_tool], add_generation_prompt=True, enable_thinking=False)
    # A tool result last, and the generation prompt after it.
    add([{"role": U, "content": "ping it"}, {"role": A, "content": None, "tool_calls": [call("ping", {}, "x")]},
         {"role": "tool", "content": "pong", "tool_call_id": "x"}], tools=[bare_tool], add_generation_prompt=True,
        enable_thinking=False)
    return out


def gemma4_conversations():
    """Gemma 4's branches: arguments of every JSON type written in its own notation (bare keys,
    <|"|> strings, nested objects and lists), several calls in one turn, reasoning shown only on
    tool-call turns after the last user turn, tool results found by tool_call_id or name, as
    text or content parts, or given the Gemma-native way (tool_responses on the assistant turn),
    an assistant turn continuing another, the developer role, thinking on and off, and tool
    schemas with the keys the template prints (enum, nullable, items, nested properties)."""
    U, A, S = "user", "assistant", "system"
    out = []

    def add(messages, **kw):
        out.append({"messages": messages, **kw})

    rich_tool = {"type": "function", "function": {
        "name": "book_trip", "description": "Book a trip.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "Where to"},
            "class": {"type": "string", "enum": ["eco", "biz"]},
            "dates": {"type": "array", "items": {"type": "string"}, "description": "ISO dates"},
            "rooms": {"type": "array", "items": {"type": "object", "properties": {"beds": {"type": "integer"}},
                                                 "required": ["beds"]}},
            "prefs": {"type": "object", "properties": {"window": {"type": "boolean"}, "note": {"type": "string"}},
                      "required": ["window"]},
            "budget": {"type": "number", "nullable": True}}},
        "response": {"description": "The booking", "type": "object"}}}
    args = {"city": "Zürich", "class": "biz", "dates": ["2025-01-02", "2025-01-05"], "rooms": [{"beds": 2}, {"beds": 1}],
            "prefs": {"window": True, "note": "quiet, please: {not json}"}, "budget": 1250.5, "pets": None,
            "flags": [True, False, None, 0, -3, 2.5e-3], "empty": {}, "none": [], "text": "line one\nline \"two\""}
    tools = [rich_tool, WEATHER_TOOL]
    history = [{"role": U, "content": "Plan a trip"},
               {"role": A, "content": "", "reasoning_content": "Need the booking tool.",
                "tool_calls": [call("book_trip", args, "t1"), call("get_weather", {"city": "Zürich", "days": 2}, "t2")]},
               {"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "t1"},
               {"role": "tool", "content": [{"type": "text", "text": "snow, "}, {"type": "text", "text": "-4 C"}],
                "tool_call_id": "t2"}]
    for kw in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
        add(history, tools=tools, add_generation_prompt=True, **kw)
        add([{"role": S, "content": "  Be brief.  "}] + history + [{"role": A, "content": "Booked; it snows."}],
            tools=tools, add_generation_prompt=False, **kw)
    # Reasoning before the last user turn is dropped; after it, kept only with tool calls.
    add([{"role": U, "content": "Q1"}, {"role": A, "content": "A1", "reasoning_content": "R1"},
         {"role": U, "content": "Q2"},
         {"role": A, "content": None, "reasoning": "R2", "tool_calls": [call("get_weather", {"city": "Oslo"}, "w")]},
         {"role": "tool", "content": "cold", "tool_call_id": "w"},
         {"role": A, "content": "<|channel>thought\nhidden<channel|>It is cold.", "reasoning_content": "R3"}],
        tools=tools, add_generation_prompt=True, enable_thinking=True)
    # A tool result matched by name only, by an unknown id, and without either.
    add([{"role": U, "content": "w?"}, {"role": A, "tool_calls": [call("get_weather", {"city": "Rome"})]},
         {"role": "tool", "content": "hot", "name": "get_weather"},
         {"role": "tool", "content": "warm", "tool_call_id": "nope"}, {"role": "tool", "content": "mild"}],
        tools=[WEATHER_TOOL], add_generation_prompt=True)
    # A call whose arguments arrive as a JSON string (the template prints it as it is).
    add([{"role": U, "content": "w?"}, {"role": A, "content": "",
                                        "tool_calls": [call("get_weather", {"city": "Lima"}, "s", as_string=True)]}],
        tools=[WEATHER_TOOL], add_generation_prompt=False)
    # A call with no result yet: the template leaves <|tool_response> open.
    add([{"role": U, "content": "w?"}, {"role": A, "content": "", "tool_calls": [call("get_weather", {"city": "Oslo"}, "o")]}],
        tools=[WEATHER_TOOL], add_generation_prompt=True)
    # Gemma's own shape: results on the assistant turn, as a mapping or a bare value.
    add([{"role": U, "content": "w?"},
         {"role": A, "tool_calls": [call("get_weather", {"city": "Oslo"}, "o")],
          "tool_responses": [{"name": "get_weather", "response": {"temp": -3, "sky": "clear", "wind": [1, 2]}},
                             {"response": "plain text"}]},
         {"role": A, "content": "Cold and clear."}], tools=[WEATHER_TOOL], add_generation_prompt=True)
    # Developer role, content parts with media, an empty system turn.
    add([{"role": "developer", "content": "dev rules"}, {"role": U, "content": [
        {"type": "image"}, {"type": "text", "text": " look "}, {"type": "audio"}, {"type": "video"}]}],
        add_generation_prompt=True)
    add([{"role": S, "content": ""}, {"role": U, "content": "hi"}], tools=[WEATHER_TOOL], add_generation_prompt=True,
        enable_thinking=True)
    # A tool that declares no parameters.
    add([{"role": U, "content": "ping"}, {"role": A, "tool_calls": [call("ping", {}, "p")]},
         {"role": "tool", "content": "pong", "tool_call_id": "p"}],
        tools=[{"type": "function", "function": {"name": "ping", "description": "Ping."}}], add_generation_prompt=True)
    return out


EXTRA_CONVERSATIONS = {"nemotron_3_nano": reasoning_history_conversations, "gemma4": gemma4_conversations}


def build_template_goldens(names=None):
    for name, source in TEMPLATE_SOURCES.items():
        if names and name not in names:
            continue
        cases = []
        for request in conversations() + EXTRA_CONVERSATIONS.get(name, list)():
            status, text = reference(source, request)
            case = {"request": request}
            case["expected" if status == "ok" else "error"] = text
            cases.append(case)
        ok = sum(1 for c in cases if "expected" in c)
        (GOLDEN_DIR / f"{name}.json").write_text(
            json.dumps({"name": name, "source": source, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8")
        print(f"{name}: {ok} renders, {len(cases) - ok} reference errors")


# ---- targeted Jinja semantics -----------------------------------------------------------------
# (template, variables) pairs; the expected text or error comes from jinja2 with transformers'
# environment, never from sparkd.

SEMANTICS = [
    # printing of Python values
    ("{{ 1 }}|{{ 1.0 }}|{{ 2.50 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ -0.0 }}|{{ 123456789.123 }}", {}),
    ("{{ True }}|{{ False }}|{{ None }}|{{ none }}|{{ true }}", {}),
    ("{{ [1, 'a', None, True, 2.5, [\"x\"], {'k': 'v'}] }}|{{ (1,) }}|{{ () }}|{{ (1, 'b') }}", {}),
    ("{{ {'a': 1, 'b': [1, 2], 'c': {'d': None}} }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', \"q\\\"uote\", 'back\\\\slash', 'nl\\nx', 'tab\\tx', 'é✓'] }}", {}),
    ("{{ d }}|{{ d.x }}|{{ l }}", {"d": {"x": 1.5, "y": [True, None]}, "l": [1.0, -2, "s"]}),
    ("{{ undefined_var }}|{{ undefined_var is defined }}|{{ undefined_var is undefined }}", {}),
    # arithmetic
    ("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + 1.5 }} {{ True + 1 }}", {}),
    ("{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ [1] * 3 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 1 ~ 'x' ~ none ~ 2.0 }}", {}),
    ("{{ 'x' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ missing + 1 }}", {}),
    # comparisons and logic
    ("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ none == none }}", {}),
    ("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'z' not in 'abc' }}", {}),
    ("{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' or [] }}|{{ none or 0 }}|{{ not 0 }}|{{ not not 'a' }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'yes' if y else 'no' }}|{{ 'only' if false }}|", {"x": [1], "y": []}),
    ("{{ 1 < 'a' }}", {}),
    # strings and slicing
    ("{{ s[0] }}|{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-3:] }}|{{ s[:100] }}|{{ s[5:1] }}|{{ s[1:-1:2] }}", {"s": "héllo wörld"}),
    ("{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[-2] }}|{{ l[10] }}|{{ l[1:2:0] if false }}", {"l": [1, 2, 3, 4]}),
    ("{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.swapcase() }}", {"s": "hELLo wORLD it's 3rd ÉTÉ"}),
    ("[{{ s.strip() }}]|[{{ s.lstrip() }}]|[{{ s.rstrip() }}]|[{{ s.strip(' \\n') }}]|[{{ 'xxhixx'.strip('x') }}]", {"s": "  \n hi there \t\n "}),
    ("{{ s.split() }}|{{ s.split(',') }}|{{ s.split(',', 1) }}|{{ s.rsplit(',', 1) }}|{{ '  a  b '.split() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}", {"s": "a,b,,c"}),
    ("{{ s.startswith('ab') }} {{ s.endswith('yz') }} {{ s.startswith(('x', 'a')) }} {{ s.find('c') }} {{ s.find('q') }} {{ s.count('b') }} {{ s.replace('b', 'B') }} {{ s.replace('b', '', 1) }}", {"s": "abcbyz"}),
    ("{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{:>5}|{:<4}|{:^6}'.format('r', 'l', 'c') }}|{{ '{:.2f}'.format(3.14159) }}", {}),
    ("{{ '-'.join(['a', 'b']) }}|{{ 'abc'.isalpha() }}|{{ '12'.isdigit() }}|{{ ' '.isspace() }}|{{ 'ABC'.isupper() }}|{{ 'abc'.islower() }}|{{ '42'.zfill(5) }}|{{ 'ab'.center(6, '*') }}", {}),
    ("{{ 'Hello %s, you are %d' % ('Bob', 30) }}|{{ '%5.1f|%-4s|%03d|%x' % (3.14159, 'ab', 7, 255) }}|{{ '%(a)s' % {'a': 1} }}", {}),
    # filters
    ("{{ '  hi  ' | trim }}|{{ 'hi' | upper }}|{{ 'HI' | lower }}|{{ 'hello world-wide (x)' | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("{{ l | length }} {{ l | count }} {{ 'héllo' | length }} {{ d | length }} {{ l | first }} {{ l | last }} {{ 'abc' | first }} {{ 'abc' | last }}", {"l": [3, 1, 2], "d": {"a": 1}}),
    ("{{ l | join }}|{{ l | join(', ') }}|{{ users | join(', ', attribute='name') }}|{{ l | sum }}|{{ l | min }}|{{ l | max }}|{{ [] | min }}", {"l": [3, 1, 2], "users": [{"name": "a"}, {"name": "b"}]}),
    ("{{ x | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ none | d('n') }}|{{ 0 | d('z', boolean=true) }}", {}),
    ("{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 42 | string }}|{{ '7' | int + 1 }}|{{ '3.9' | int }}|{{ 'x' | int }}|{{ 'x' | int(5) }}|{{ '0x1A' | int(0, 16) }}|{{ 2.7 | int }}", {}),
    ("{{ '2.5' | float }}|{{ 'abc' | float }}|{{ 3 | float }}|{{ -3 | abs }}|{{ -2.5 | abs }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(0, 'ceil') }}|{{ 2.9 | round(1, 'floor') }}|{{ 42 | round }}", {}),
    ("{{ l | list }}|{{ 'abc' | list }}|{{ d | list }}|{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ d | dictsort(by='value') }}", {"l": [1, 2], "d": {"b": 2, "a": 3, "C": 1}}),
    ("{{ l | sort }}|{{ l | sort(reverse=true) }}|{{ w | sort }}|{{ w | sort(case_sensitive=true) }}|{{ users | sort(attribute='age') | map(attribute='name') | list }}|{{ users | sort(attribute='age,name') | map(attribute='name') | join }}", {"l": [3, 1, 2], "w": ["b", "A", "a", "C"], "users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "w", "age": 3}]}),
    ("{{ w | unique | list }}|{{ w | unique(case_sensitive=true) | list }}|{{ l | reverse | list }}|{{ 'abc' | reverse }}|{{ l | batch(2) | list }}|{{ l | batch(2, 0) | list }}|{{ l | slice(2) | list }}", {"l": [1, 2, 3], "w": ["a", "A", "b", "a"]}),
    ("{{ l | map('upper') | list }}|{{ users | map(attribute='name') | join('/') }}|{{ users | map(attribute='missing', default='-') | list }}|{{ l | map('replace', 'a', 'b') | list }}", {"l": ["a", "ba"], "users": [{"name": "p"}, {"name": "q"}]}),
    ("{{ n | select('odd') | list }}|{{ n | reject('odd') | list }}|{{ n | select('divisibleby', 3) | list }}|{{ n | select | list }}|{{ n | select('gt', 2) | list }}|{{ n | select('in', [1, 5]) | list }}", {"n": [0, 1, 2, 3, 4, 5, 6]}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}|{{ ms | rejectattr('role', 'eq', 'user') | list | length }}|{{ ms | selectattr('flag') | list | length }}|{{ ms | selectattr('flag', 'defined') | list | length }}", {"ms": [{"role": "user", "c": 1}, {"role": "assistant", "c": 2, "flag": True}, {"role": "user", "c": 3, "flag": False}]}),
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(ensure_ascii=true) }}|{{ 'é\"\\n<>&' | tojson }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}", {"d": {"z": 1, "a": [1.0, 2.5e-8, None, True, "é"], "m": {"x": {}}}}),
    ("{{ 'x' | center(7) }}|{{ 'one two  three' | wordcount }}|{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | truncate(9, true) }}|{{ 'foo bar baz qux' | truncate(11) }}|{{ 'foo bar baz qux' | truncate(11, false, '...', 0) }}", {}),
    ("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}|{{ '%s-%s' | format('a', 1) }}|{{ '<b>&' | escape }}|{{ '<b>' | e }}|{{ '<i>' | safe }}", {}),
    ("{{ {'k': 1e400, 'n': -1e400} | tojson }}|{{ 1e400 }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ [1, 2] | map('nosuchfilter') | list }}", {}),
    # tests
    ("{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.0 is number }} {{ true is number }}", {}),
    ("{{ 1 is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }}", {}),
    ("{{ d is mapping }} {{ l is mapping }} {{ l is sequence }} {{ 's' is sequence }} {{ d is iterable }} {{ 5 is iterable }} {{ f is callable }} {{ 'x' is callable }}", {"d": {}, "l": []}),
    ("{{ 2 is in [1, 2] }} {{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is le 2 }} {{ 2 is ge 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is not defined }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"f": None}),
    # control structures
    ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"l": ["a", "b", "c"]}),
    ("{% for x in l %}{{ loop.previtem | default('^') }}{{ x }}{{ loop.nextitem | default('$') }} {{ loop.cycle('odd', 'even') }};{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}|{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}", {}),
    ("{% for row in rows %}{% for c in row %}{{ loop.index }}{{ c }}{% endfor %}/{{ loop.index }}{% endfor %}", {"rows": [["a", "b"], ["c"]]}),
    ("{% for x in l %}{{ loop.changed(x) }}{% endfor %}", {"l": [1, 1, 2, 2, 1]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}", {}),
    ("{% if true %}{% set q = 1 %}{% endif %}{{ q }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 2) %}{{ t }}", {}),
    ("{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }}|{{ ns.items }}|{{ ns.missing }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]|{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}|{% if not a and not b %}none{% endif %}", {"a": 0, "b": "", "c": [0]}),
    ("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }}|{{ greet('Bo', 'Hi') }}|{{ greet('Cy', punct='?') }}", {}),
    ("{% macro m(a) %}{{ a }}:{{ varargs }}:{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}|{% macro each(l) %}{% for x in l %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}", {}),
    ("{% macro f() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ f() }}", {}),
    ("{% filter upper %}quiet {{ 'words' }}{% endfilter %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}|{# a comment #}after", {}),
    ("{{ dict(a=1, b='x') }}|{{ dict(a=1).items() | list }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 'dflt') }}|{{ d.keys() | list }}|{{ d.values() | list }}", {"d": {"a": 1}}),
    ("{{ d['key'] }}|{{ d.key }}|{{ d['missing'] }}|{{ l[0] }}|{{ l.0 }}|{{ d['items'] }}", {"d": {"key": "v", "items": "key wins for []"}, "l": ["first"]}),
    ("{{ raise_exception('Custom failure: roles must alternate') }}", {}),
    ("{% set l = [1] %}{{ l.append(2) }}", {}),
    ("{{ {}.update({'a': 1}) }}", {}),
    ("{{ ''.__class__ }}", {}),
    ("{{ foo.bar }}", {}),
    ("{{ none.attr }}|{{ 1.attr }}|", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ range(1000000) | length }}", {}),
    ("{% set ns = namespace() %}{% set ns._hidden = 1 %}", {}),
    ("{{ 'é' ~ 'ü' | upper }}|{{ ('é' ~ 'ü') | upper }}|{{ -3 | abs }}|{{ - 3 | abs }}", {}),
    ("{% for item in tree recursive %}{{ item.name }}{{ loop.depth }}{% if item.children %}[{{ loop(item.children) }}]{% endif %}{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e"}]}),
    ("{% for g in users | groupby('role') %}{{ g.grouper }}:{{ g.list | map(attribute='n') | join(',') }};{% endfor %}|{% for role, items in users | groupby('role') %}{{ role }}{{ items | length }}{% endfor %}",
     {"users": [{"role": "b", "n": 1}, {"role": "a", "n": 2}, {"role": "b", "n": 3}]}),
    ("{% set j = joiner(' | ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}|{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}", {}),
    ("{{ [1, 2, 3] | sum(start=10) }}|{{ items | sum(attribute='x') }}|{{ [0.5, 0.25] | sum }}", {"items": [{"x": 1}, {"x": 2.5}]}),
    ("{{ nope | upper }}|{{ nope | length }}|{{ nope | list }}|{{ nope | join }}|{{ nope | first }}|{{ nope | default(none) }}|{{ nope is none }}", {}),
    ("{{ none | string }}|{{ none is none }}|{{ none ~ '' }}|{{ [none] | tojson }}|{{ none | default('x') }}|{{ none | default('x', true) }}", {}),
    ("{{ 1e100 }}|{{ 12345678901234567.0 }}|{{ 0.000123 }}|{{ 1 / 3 }}|{{ 2 / 3 * 3 }}|{{ 1e22 }}|{{ 123456789012345678 }}|{{ -1.5e-10 }}|{{ 100.0 }}", {}),
    ("{{ '%.3f' | format(2.0) }}|{{ '%s and %s' | format('a', 'b') }}|{{ '%5s|%-5s|' | format('r', 'l') }}|{{ '%d%%' | format(50) }}", {}),
    ("{{ messages[-1]['content'] }}|{{ messages[0].role }}|{{ messages | length }}|{{ (messages | last).content }}|{{ messages[1:] | map(attribute='role') | join }}",
     {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
    ("{% set x = [1, 2] + [3] %}{{ x | length }}|{{ 'abc' is in 'xabcx' }}|{{ 5 | string | length }}|{{ (1, 2) | list }}|{{ [3, 1] | sort | first }}|{{ 'b' in ['a', 'b'] }}", {}),
    ("{{ ['\\x00', '\\u2028', '\\x7f', '\\xa0', '\\U0001F600'] }}|{{ '\\u2028\\x00' | tojson }}|{{ 'é😀' | tojson(ensure_ascii=true) }}", {}),
    ("{{ x.y.z | default('d') }}", {"x": {}}),
    ("{% if x is defined and x.y %}yes{% else %}no{% endif %}|{{ x.y is defined }}|{{ x['y'] is undefined }}", {"x": {"z": 1}}),
    ("{{ '  a  '.strip() ~ '|' ~ 'a b c'.split(' ', 1) | join('/') ~ '|' ~ 'k=v'.partition('=') | list | join(',') }}", {}),
    ("{% set d = {'b': 1, 'a': 2} %}{{ d | dictsort | map('first') | join }}|{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}|{{ d.items() | list }}", {}),
    ("{{ ('a', 'b') | join('-') }}|{{ {'x': 1} | list }}|{{ 'abc' | batch(2) | list }}|{{ range(5) | slice(2) | list }}|{{ [1, 2, 3] | reject('odd') | first }}", {}),
    ("{{ [{'a': 2}, {'a': 1}] | sort(attribute='a') | map(attribute='a') | list }}|{{ ['b', 'a'] | max }}|{{ [{'v': 3}, {'v': 9}] | max(attribute='v') }}|{{ ['B', 'a'] | min }}", {}),
    ("{{ 10 // 3 * 3 + 10 % 3 }}|{{ 2 ** 0.5 }}|{{ (-8) ** 2 }}|{{ 7.0 / 2 }}|{{ 1 - 0.9 }}|{{ 3 * 1.1 }}|{{ 0.1 * 3 }}", {}),
    # whitespace control
    ("a  {{- ' b ' -}}  c  {%- if true -%}  d  {%- endif -%}  e", {}),
    ("line1\n    {% if true %}\n    inside\n    {% endif %}\nline2\n", {}),
    ("  {%+ if true %}keep{% endif %}\n{% if true +%}\nnl kept{% endif %}", {}),
    ("{# comment #}\n  {# indented comment #}\nx\n{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("a\n{% raw %}\n  {{ x }}\n{% endraw %}\nb", {}),
    ("{{ 'no trailing newline stripped here' }}\n\n", {}),
    ("{%- set x = 1 -%}\n\n  {{ x }}  \n\n{%- set y = 2 %}\n{{ y }}", {}),
    ("win\r\nlines\r\n{% if true %}\r\nx\r\n{% endif %}\r\n", {}),
    ("{{ \"\\u00e9\\x41\\n\\t\\\\\" }}|{{ 'adjacent' 'strings' }}|{{ 1_000 }}|{{ 0x10 }}|{{ 1.5e3 }}", {}),
    ("{% generation %}assistant text{% endgeneration %}|{% block b %}block body{% endblock %}", {}),
    ("{{ strftime_now('%Y') | length }}", {}),
    # syntax errors
    ("{% if x %}unclosed", {}),
    ("{{ 1 + }}", {}),
    ("{% endfor %}", {}),
    ("{% for %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{% unknowntag %}", {}),
]


def build_semantics_golden(path):
    from transformers.utils.chat_template_utils import _compile_jinja_template

    cases = []
    for template, variables in SEMANTICS:
        case = {"template": template, "variables": variables}
        try:
            case["expected"] = _compile_jinja_template(template).render(**variables)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    path.write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    ok = sum(1 for c in cases if "expected" in c)
    print(f"jinja_semantics: {ok} renders, {len(cases) - ok} reference errors")


if __name__ == "__main__":
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO)
    # Names given: only those templates' files (e.g. `... gen_template_golden.py nemotron_3_nano`).
    build_template_goldens(sys.argv[1:])
    if not sys.argv[1:]:
        build_semantics_golden(GOLDEN_DIR / "jinja_semantics.json")
