"""Gemma 3 as llama.cpp's converter writes it (GGUF architecture gemma3; the file written at
test time by tests/gen/gguf_gemma3.py from tests/golden/models/gemma3_gguf): what `sparkd check`
reads from it, and files that disagree with themselves, refused by name. Its logits against
transformers' are tests/unit/test_cpu_forward.cpp's."""
import numpy as np

import golden_gguf
from conftest import REPO, check_refuses as refused, run_sparkd
from test_hybrid_hostile import generate, gguf_copy

GEMMA3 = {"source": "gemma3.gguf", "arch": "gemma3"}
DESCRIBED = ("  layers ", "  attention ", "  rope ", "  layer ", "  vocab ", "  max positions ")


def described(path):
    r = run_sparkd("check", "--model", path)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if line.startswith(DESCRIBED)]


def test_check_describes_the_gguf_as_its_folder():
    """What the file leaves unsaid (the query scale, the full layers' RoPE scaling, the
    sliding layers' base) read as llama.cpp's loader reads it: the model its folder describes."""
    gguf = described(golden_gguf.path("gemma3.gguf"))
    assert gguf == described(REPO / "tests/golden/models/gemma3_gguf")
    assert any("queries x 16^-1/2" in line for line in gguf), gguf
    assert any("linear scaling factor 2; sliding layers theta 10000" in line for line in gguf), gguf


def test_a_file_without_its_window_is_refused(tmp_path):
    refused(gguf_copy(tmp_path, drop_keys=("gemma3.attention.sliding_window",), **GEMMA3),
            "gemma3.attention.sliding_window", "missing")


def test_a_norm_not_in_f32_is_refused(tmp_path):
    """llama.cpp writes the norms (with the one added) in F32; the loader takes the one back."""
    bad = gguf_copy(tmp_path, {"blk.2.post_ffw_norm.weight": lambda a: a.astype(np.float16)}, **GEMMA3)
    r = generate(bad)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "model.layers.2.post_feedforward_layernorm.weight" in r.stderr and "F32" in r.stderr, r.stderr
