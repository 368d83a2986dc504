"""`sparkd template` against Python jinja2 under transformers' settings, live.

Every conversation of tests/gen/gen_template_golden.py is rendered by the reference in this
process and by the binary (SPARKD_BIN); the texts must be identical. Templates found in
SPARKD_EXTRA_TEMPLATES (a folder of *.jinja files, e.g. other models' templates) are compared
the same way.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import gen_template_golden as gen  # noqa: E402

BIN = os.environ.get("SPARKD_BIN", str(REPO / "build" / "sparkd"))
GOLDEN = sorted(p for p in (REPO / "tests" / "golden" / "templates").glob("*.json") if p.name != "jinja_semantics.json")


def run_template(model, request, extra_args=()):
    data = request if isinstance(request, bytes) else json.dumps(request, ensure_ascii=False).encode("utf-8")
    return subprocess.run([BIN, "template", "--model", str(model), *extra_args], input=data,
                          capture_output=True, timeout=60)


def model_path_for(source, tmp_path):
    if source["kind"] == "fixture":
        return gen.fixtures_dir() / source["path"]
    if source["kind"] == "gguf":
        path = REPO / source["path"]
        assert path.exists(), f"{path} is missing: run `make model`"
        return path
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    config = {k: v for k, v in source.items() if k.endswith("_token")}
    if source["kind"] == "template_file":  # the file itself, as sparkd finds it beside a model
        (folder / "chat_template.jinja").write_bytes((gen.fixtures_dir() / source["path"]).read_bytes())
    else:
        config["chat_template"] = source["template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def compare_all(source, model, requests):
    same, refused, mismatches = 0, 0, []
    for i, request in enumerate(requests):
        status, expected = gen.reference(source, request)
        proc = run_template(model, request)
        if status == "ok":
            got = proc.stdout.decode("utf-8", errors="replace")
            if proc.returncode == 0 and got == expected:
                same += 1
            else:
                mismatches.append((i, proc.returncode, proc.stderr.decode()[-300:], expected[:300], got[:300]))
        else:
            if proc.returncode == 2 and proc.stderr:
                refused += 1
            else:
                mismatches.append((i, proc.returncode, "reference refused: " + expected, "", proc.stdout.decode()[:300]))
    return same, refused, mismatches


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.stem)
def test_live_against_reference(golden, tmp_path):
    data = json.loads(golden.read_text(encoding="utf-8"))
    source = data["source"]
    requests = [c["request"] for c in data["cases"]]
    same, refused, mismatches = compare_all(source, model_path_for(source, tmp_path), requests)
    assert not mismatches, f"{golden.stem}: {len(mismatches)} differ from jinja2, first: {mismatches[0]}"
    assert same >= 30, f"{golden.stem}: only {same} renders compared"
    print(f"{golden.stem}: {same} identical, {refused} refused like the reference")


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.stem)
def test_golden_files_are_current(golden):
    """The committed expectations are what the installed reference renders today."""
    data = json.loads(golden.read_text(encoding="utf-8"))
    for case in data["cases"]:
        status, text = gen.reference(data["source"], case["request"])
        if "expected" in case:
            assert status == "ok" and text == case["expected"]
        else:
            assert status == "error"


def extra_templates():
    folder = os.environ.get("SPARKD_EXTRA_TEMPLATES")
    return sorted(Path(folder).glob("*.jinja")) if folder else []


@pytest.mark.skipif(not extra_templates(), reason="set SPARKD_EXTRA_TEMPLATES to a folder of *.jinja files")
@pytest.mark.parametrize("path", extra_templates(), ids=lambda p: p.stem)
def test_extra_templates_against_reference(path, tmp_path):
    source = {"kind": "inline", "template": path.read_text(encoding="utf-8"), "bos_token": "<s>", "eos_token": "</s>"}
    same, refused, mismatches = compare_all(source, model_path_for(source, tmp_path), gen.conversations())
    assert not mismatches, f"{path.stem}: {len(mismatches)} differ from jinja2, first: {mismatches[0]}"


def test_strftime_now_uses_todays_date(tmp_path):
    from datetime import datetime

    source = {"kind": "inline", "template": "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %H') }}"}
    proc = run_template(model_path_for(source, tmp_path), {"messages": [{"role": "user", "content": "x"}]})
    assert proc.returncode == 0, proc.stderr
    now = datetime.now()
    assert proc.stdout.decode() in (now.strftime("%d %b %Y|%A %H"),), proc.stdout


def test_bad_input_exits_2_with_a_message(tmp_path):
    qwen = gen.fixtures_dir() / "tokenizers" / "qwen3"
    proc = run_template(qwen, b"{not json")
    assert proc.returncode == 2 and b"JSON" in proc.stderr
    proc = run_template(qwen, {"no_messages": []})
    assert proc.returncode == 2 and b"messages" in proc.stderr
    proc = run_template(qwen, {"messages": []})
    assert proc.returncode == 2 and proc.stderr
    gemma = gen.fixtures_dir() / "tokenizers" / "gemma3"
    proc = run_template(gemma, {"messages": [{"role": "assistant", "content": "x"}]})
    assert proc.returncode == 2 and b"Conversation roles must alternate" in proc.stderr
    bare = tmp_path / "no_template"
    bare.mkdir()
    (bare / "tokenizer_config.json").write_text('{"eos_token": "<|return|>"}')
    proc = run_template(bare, {"messages": [{"role": "user", "content": "x"}]})
    assert proc.returncode == 2 and b"chat template" in proc.stderr


def test_hostile_template_exits_2_quickly(tmp_path):
    source = {"kind": "inline", "template": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"}
    proc = run_template(model_path_for(source, tmp_path), {"messages": [{"role": "user", "content": "x"}]})
    assert proc.returncode == 2 and b"too deeply" in proc.stderr
    (tmp_path / "loop.jinja").write_text("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    proc = run_template(model_path_for(source, tmp_path), {"messages": [{"role": "user", "content": "x"}]},
                        ["--chat-template", str(tmp_path / "loop.jinja")])
    assert proc.returncode == 2 and b"budget" in proc.stderr


def test_output_has_no_added_newline(tmp_path):
    source = {"kind": "inline", "template": "{{ messages[0].content }}"}
    proc = run_template(model_path_for(source, tmp_path), {"messages": [{"role": "user", "content": "exact"}]})
    assert proc.returncode == 0 and proc.stdout == b"exact"
