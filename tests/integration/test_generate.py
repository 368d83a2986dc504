"""sparkd generate: offline generation through the whole engine with the default model,
checked against the transformers greedy reference (tests/golden/smollm2_greedy.json) and
against sparkd's own tokenizer commands for the text."""
import json

import pytest

from conftest import MODEL, REPO, run_sparkd

GOLDEN = json.loads((REPO / "tests" / "golden" / "smollm2_greedy.json").read_text())


def generate(*args, timeout=300):
    proc = run_sparkd("generate", "--model", MODEL, *args, timeout=timeout)
    return proc


def generate_ids(prompt, *args):
    proc = generate("--prompt", prompt, "--ids", *args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


@pytest.mark.parametrize("case", GOLDEN["cases"][:2], ids=lambda c: c["prompt"][:20])
def test_greedy_matches_reference_and_stops_at_eos(case):
    # The reference ran without an EOS stop: sparkd stops at the first EOS (and includes
    # it in output_ids, as vLLM does), so compare up to and including that token.
    out = generate_ids(case["prompt"], "--max-tokens", "16")
    assert out["prompt_ids"] == case["prompt_ids"]
    ref = case["output_ids"][:16]
    assert out["output_ids"] == ref[:len(out["output_ids"])]
    assert len(out["output_ids"]) == 16 or out["output_ids"][-1] in (1, 2)


def test_text_is_the_detokenized_output():
    out = generate_ids("The capital of France is", "--max-tokens", "12")
    proc = run_sparkd("detokenize", "--model", MODEL,
                      stdin=json.dumps({"ids": out["output_ids"], "skip_special_tokens": True}) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["text"] == out["text"]


def test_seeded_sampling_is_reproducible():
    a = generate_ids("Once upon a time", "--max-tokens", "12", "--temperature", "0.9", "--seed", "7")
    b = generate_ids("Once upon a time", "--max-tokens", "12", "--temperature", "0.9", "--seed", "7")
    c = generate_ids("Once upon a time", "--max-tokens", "12", "--temperature", "0.9", "--seed", "8")
    assert a == b
    assert a["prompt_ids"] == c["prompt_ids"]
    assert a["output_ids"] != c["output_ids"]


def test_plain_output_prints_the_text():
    ids = generate_ids("The capital of France is", "--max-tokens", "8")
    proc = generate("--prompt", "The capital of France is", "--max-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ids["text"] + "\n"


@pytest.mark.parametrize("args, needle", [
    ((), "usage"),
    (("--prompt", "hi", "--max-tokens", "0"), "max_tokens"),
    (("--prompt", "hi", "--temperature", "-1"), "temperature"),
    (("--prompt", "hi", "--max-tokens", "100000"), "context"),
    (("--prompt", "hi", "--bogus", "1"), "bogus"),
])
def test_bad_arguments_exit_2_with_a_message(args, needle):
    proc = generate(*args, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert needle in proc.stderr.lower()


def test_missing_model_exits_2():
    proc = run_sparkd("generate", "--model", REPO / "no-such-model.gguf", "--prompt", "hi")
    assert proc.returncode == 2
    assert "no-such-model" in proc.stderr
