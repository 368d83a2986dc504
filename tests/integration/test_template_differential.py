"""sparkd's chat-template engine against Python jinja2 under transformers' settings, case by case.

Two sets of cases, each rendered by the reference in this process and by build/template_tool
(SPARKD_TEMPLATE_TOOL), one process for the whole batch:
  * generated: tests/gen/gen_template_cases.py with a fixed seed (SPARKD_TEMPLATE_CASES
    cases, 10,000 by default), the bare engine against jinja2's from_string().render() in the
    environment transformers compiles chat templates with;
  * shipped: every fixture model's template and every template the template oracle uses,
    through ChatTemplate::from_model().render() against transformers' render_jinja_template,
    with conversations whose messages omit optional fields in each way clients send them.

A case agrees when both render the same text, or both raise an error of the same class.
"Class" is jinja2's exception class as far as sparkd can say it:
  syntax    jinja2.TemplateSyntaxError (and its TemplateAssertionError)
  undefined jinja2.UndefinedError: an undefined value was used (printed in an operation,
            called, indexed, ...); the message must match too ("'x' is undefined", ...)
  raised    raise_exception(msg): jinja2.TemplateError itself; the message must match
  other     anything else jinja2 raises (TypeError, SecurityError, ValueError, ...)
sparkd reports TemplateError::Kind; any other C++ exception is "internal" and never agrees.
For the shipped templates only "both raise" is required (the reference normalises and
raises outside the template too, e.g. for tools that are not dicts).
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import gen_template_cases  # noqa: E402
import gen_template_golden as golden  # noqa: E402

TOOL = os.environ.get("SPARKD_TEMPLATE_TOOL", str(REPO / "build" / "template_tool"))
SEED = 35
COUNT = int(os.environ.get("SPARKD_TEMPLATE_CASES", "10000"))
LOCATION = re.compile(r"^(chat template error: )?(line \d+: )?")
# repr() of a generator or iterator names its memory address, which no two runs share; a
# template's replace('a', 'b') can turn the " at 0x7fa..." around it into " bt 0x7fb...".
ADDRESS = re.compile(r" [ab]t 0x[0-9a-f]+(?=>|&gt;)", re.IGNORECASE)


def run_tool(cases):
    """Renders every case with one template_tool process; one result per case, in order."""
    assert Path(TOOL).exists(), f"{TOOL} is missing: make build/template_tool"
    data = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases).encode("utf-8")
    proc = subprocess.run([TOOL], input=data, capture_output=True, timeout=300)
    results = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert proc.returncode == 0 and len(results) == len(cases), (
        f"template_tool exited {proc.returncode} after {len(results)} of {len(cases)} cases; "
        f"the next case: {json.dumps(cases[len(results)], ensure_ascii=False)[:2000] if len(results) < len(cases) else ''}; "
        f"stderr: {proc.stderr.decode(errors='replace')[-1000:]}")
    return results


def run_tool_async(cases):
    """run_tool in a thread, so that the C++ and the Python renders use both cores."""
    box = {}

    def work():
        try:
            box["results"] = run_tool(cases)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=work)
    thread.start()

    def wait():
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["results"]

    return wait


def error_class(e):
    import jinja2

    if isinstance(e, jinja2.TemplateSyntaxError):
        return "syntax"
    if isinstance(e, jinja2.UndefinedError):
        return "undefined"
    if type(e) is jinja2.TemplateError:
        return "raised"
    return "other"


def reference_result(render):
    try:
        return {"ok": True, "text": render()}
    except Exception as e:
        return {"ok": False, "class": error_class(e), "error": str(e), "type": type(e).__name__}


def disagreement(expected, got, classes=True):
    """None when the two results agree, else a short reason."""
    if expected["ok"]:
        if not got["ok"]:
            return "jinja2 renders, sparkd raises"
        same = ADDRESS.sub(" at 0x", got["text"]) == ADDRESS.sub(" at 0x", expected["text"])
        return None if same else "texts differ"
    if got["ok"]:
        return "jinja2 raises, sparkd renders"
    if not classes:
        return None
    if got["class"] != expected["class"]:
        return f"error classes differ: {expected['class']} ({expected['type']}) vs {got['class']}"
    if expected["class"] in ("undefined", "raised") and LOCATION.sub("", got["error"]) != expected["error"]:
        return "error messages differ"
    return None


def report(differences, total, what):
    lines = [f"{len(differences)} of {total} {what} differ from jinja2:"]
    for case, expected, got, why in differences[:40]:
        lines.append(f"--- {why}\n case: {json.dumps(case, ensure_ascii=False)}\n jinja2: "
                     f"{json.dumps(expected, ensure_ascii=False)}\n sparkd: {json.dumps(got, ensure_ascii=False)}")
    return "\n".join(lines)


# ---- generated templates ------------------------------------------------------------------------

def jinja_environment():
    """The environment transformers compiles chat templates in (the one the oracle uses)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template("").environment


def test_generated_templates_match_jinja2():
    started = time.monotonic()
    cases = gen_template_cases.generate(SEED, COUNT)
    tool = run_tool_async(cases)
    env = jinja_environment()
    expected = []
    with warnings.catch_warnings():
        # jinja2 compiles `none[0]` to Python source that CPython warns about.
        warnings.simplefilter("ignore", SyntaxWarning)
        for case in cases:
            expected.append(reference_result(lambda: env.from_string(case["template"]).render(**case["context"])))
    got = tool()
    differences = [(c, e, g, why) for c, e, g in zip(cases, expected, got) if (why := disagreement(e, g))]
    assert not differences, report(differences, len(cases), "generated cases")
    renders = sum(1 for e in expected if e["ok"])
    by_class = {}
    for e in expected:
        if not e["ok"]:
            by_class[e["class"]] = by_class.get(e["class"], 0) + 1
    # A generator that only produced errors (or only renders) would compare little.
    assert renders >= len(cases) // 4 and by_class.get("undefined", 0) >= len(cases) // 10, (renders, by_class)
    print(f"{len(cases)} generated cases identical: {renders} renders, errors {by_class}, "
          f"{time.monotonic() - started:.1f} s")


# ---- shipped and fixture templates --------------------------------------------------------------

def special_tokens(config):
    """Special-token strings from a tokenizer_config.json (a string or an AddedToken object)."""
    out = {}
    for key, value in config.items():
        if key.endswith("_token") and isinstance(value, dict):
            value = value.get("content")
        if key.endswith("_token") and isinstance(value, str):
            out[key] = value
    return out


def shipped_templates():
    """(name, template text, special tokens) for every fixture folder and oracle template."""
    out = []
    for folder in sorted((golden.fixtures_dir() / "tokenizers").iterdir()):
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
        jinja_file = folder / "chat_template.jinja"
        template = jinja_file.read_text(encoding="utf-8") if jinja_file.exists() else config.get("chat_template")
        if isinstance(template, str):
            out.append((folder.name, template, special_tokens(config)))
    for folder in sorted((golden.fixtures_dir() / "templates").iterdir()):  # templates without a tokenizer
        if (folder / "chat_template.jinja").exists():
            out.append((folder.name, (folder / "chat_template.jinja").read_text(encoding="utf-8"), {}))
    for name, source in golden.TEMPLATE_SOURCES.items():
        if source["kind"] == "inline":
            out.append((name, source["template"], {k: v for k, v in source.items() if k.endswith("_token")}))
        elif source["kind"] == "gguf":
            path = REPO / source["path"]
            assert path.exists(), f"{path} is missing: run `make model`"
            template, special = golden.gguf_template(str(path))
            out.append((name, template, special))
    return out


def tool_call(name, arguments, call_id=None, as_string=False):
    c = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments) if as_string else arguments}}
    if call_id:
        c["id"] = call_id
    return c


ABSENT = object()


def shaped_conversations():
    """Requests whose messages leave out optional fields, in each shape clients send."""
    tools = [golden.WEATHER_TOOL]
    contents = {"missing": ABSENT, "null": None, "empty": "", "parts": [{"type": "text", "text": "Checking."}],
                "two parts": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "text": "Checking."}
    out = []
    for label, content in contents.items():
        for as_string in (False, True):
            for call_id in (None, "call_1"):
                assistant = {"role": "assistant",
                             "tool_calls": [tool_call("get_weather", {"city": "Oslo"}, call_id, as_string)]}
                if content is not ABSENT:
                    assistant["content"] = content
                tool = {"role": "tool", "content": "cold"}
                if call_id:
                    tool["tool_call_id"] = call_id
                for system in (False, True):
                    messages = [{"role": "system", "content": "Be brief."}] if system else []
                    messages += [{"role": "user", "content": "Weather in Oslo?"}, assistant, tool]
                    for agp in (True, False):
                        out.append({"messages": messages, "tools": tools, "add_generation_prompt": agp})
                out.append({"messages": [{"role": "user", "content": "Weather?"}, assistant, tool,
                                         {"role": "assistant", "content": "It is cold."}, {"role": "user", "content": "Thanks"}],
                            "tools": tools, "add_generation_prompt": True})
                out.append({"messages": [{"role": "user", "content": "Weather?"}, assistant], "tools": tools,
                            "add_generation_prompt": False})
        # Plain assistant turns and tool results in the same shapes.
        plain = {"role": "assistant"} if content is ABSENT else {"role": "assistant", "content": content}
        out.append({"messages": [{"role": "user", "content": "Hi"}, plain, {"role": "user", "content": "Again"}],
                    "add_generation_prompt": True})
        result = {"role": "tool", "name": "get_weather"} if content is ABSENT else {"role": "tool", "content": content}
        out.append({"messages": [{"role": "user", "content": "Weather?"},
                                 {"role": "assistant", "content": None, "tool_calls": [tool_call("get_weather", {"city": "Rome"})]},
                                 result], "tools": tools, "add_generation_prompt": True})
        user = {"role": "user"} if content is ABSENT else {"role": "user", "content": content}
        out.append({"messages": [user], "add_generation_prompt": True})
    out.append({"messages": [{"role": "user", "content": "x", "name": None},
                             {"role": "assistant", "content": "y", "reasoning_content": None, "tool_calls": None}],
                "tools": None, "add_generation_prompt": True})
    out.append({"messages": [{"role": "user", "content": "x"}], "tools": [], "add_generation_prompt": True})
    return out


def model_folder(tmp_path, name, template, special):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({**special, "chat_template": template}), encoding="utf-8")
    return folder


def test_shipped_templates_with_omitted_fields_match_jinja2(tmp_path):
    templates = shipped_templates()
    assert {"qwen3", "llama3_1", "gemma3", "gptoss", "qwen3_coder", "qwen3_5"} <= {name for name, _, _ in templates}
    requests = shaped_conversations()
    cases, expected = [], []
    for name, template, special in templates:
        folder = str(model_folder(tmp_path, name, template, special))
        for request in requests:
            cases.append({"model": folder, "messages": request["messages"], "tools": request.get("tools"),
                          "add_generation_prompt": request["add_generation_prompt"]})
            expected.append(reference_result(lambda: golden.render_with_template(template, special, request)))
    got = run_tool(cases)
    differences = [(c, e, g, why) for c, e, g in zip(cases, expected, got) if (why := disagreement(e, g, classes=False))]
    assert not differences, report(differences, len(cases), "shipped-template cases")
    renders = sum(1 for e in expected if e["ok"])
    assert renders >= len(cases) // 2, f"only {renders} of {len(cases)} rendered: the comparison says little"
    print(f"{len(templates)} templates x {len(requests)} conversations identical ({renders} renders)")
