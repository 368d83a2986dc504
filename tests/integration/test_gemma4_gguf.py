"""Hostile gemma4 GGUF files: the tiny Gemma 4 (tests/golden/models/gemma4) written as
llama.cpp's converter writes it (tests/gen/gguf_gemma4.py), with one key or tensor wrong.
`sparkd check` refuses each with an error naming it (exit 2), and the file as written loads."""
import pytest

from conftest import REPO, run_sparkd
import gguf_gemma4

SRC = str(REPO / "tests" / "golden" / "models" / "gemma4")

CASES = [
    ({}, None),
    ({"pattern": [True, False, True]}, "attention.sliding_window_pattern must hold one flag a layer (4)"),
    ({"kv_heads": [2, 1, 2, 3]}, "attention.head_count_kv [3] = 3 does not divide head_count"),
    ({"kv_heads": [2, 1, 1, 1]}, "attention.head_count_kv differs between layers of one type"),
    ({"kv_heads": [2, 1, 2]}, "attention.head_count_kv has 3 entries, but block_count is 4"),
    ({"rope_freqs": [1.0, 1.0, 2.0] + [1e30] * 13}, "rope_freqs.weight is not proportional RoPE"),
    ({"rope_freqs": [1.0] * 4}, "rope_freqs.weight must be F32 of 16 values"),
]


@pytest.mark.parametrize("broken,error", CASES)
def test_hostile_gemma4_gguf(tmp_path, broken, error):
    path = tmp_path / "gemma4.gguf"
    gguf_gemma4.write(SRC, str(path), broken)
    r = run_sparkd("check", "--model", path)
    if error is None:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "full layers 1 kv heads, head_dim 32, K = V" in r.stdout
        return
    assert r.returncode == 2, r.stdout + r.stderr
    assert error in r.stderr, r.stderr
