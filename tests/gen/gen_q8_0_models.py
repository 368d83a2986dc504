#!/usr/bin/env python3
# gen_q8_0_models.py — the tiny Llama and the tiny Qwen3-MoE (tests/golden/models/llama
# and qwen3_moe, f32) quantized to Q8_0 by the `gguf` package's own quantizer, written as llama.cpp's converter would write it
# (gen_loader_golden.write_gguf_model), with Llama 3 rope scaling for an original context
# of 8192 (see below). The GPU checks run it on the CUDA backend, whose
# matrices stay packed, against the CPU backend on the same file.
#
# usage: gen_q8_0_models.py [DIR]   (default: tests/golden/models; writes llama_q8_0.gguf
# and qwen3_moe_q8_0.gguf there)
import json
import os
import sys
import types

from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_loader_golden import write_gguf_model  # noqa: E402

SRC = "tests/golden/models/llama"


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/models"
    with open(os.path.join(SRC, "config.json")) as f:
        c = types.SimpleNamespace(**json.load(f))
    # GGUF keeps Llama 3 rope scaling only as per-frequency divisors, which sparkd's
    # reader recognises for the original context of the released models (8192); the
    # fixture's 64 would be refused. The checks compare two backends on this same file,
    # so its scaling need not match the safetensors model's.
    c.rope_parameters = dict(c.rope_parameters, original_max_position_embeddings=8192)
    tensors = load_file(os.path.join(SRC, "model.safetensors"))
    write_gguf_model(os.path.join(out_dir, "llama_q8_0.gguf"), "llama", c, c.head_dim, tensors, qtype=Q.Q8_0)
    # The MoE model's experts are stacked per projection, as llama.cpp's converter does.
    moe_src = "tests/golden/models/qwen3_moe"
    with open(os.path.join(moe_src, "config.json")) as f:
        m = types.SimpleNamespace(**json.load(f))
    moe = load_file(os.path.join(moe_src, "model.safetensors"))
    write_gguf_model(os.path.join(out_dir, "qwen3_moe_q8_0.gguf"), "qwen3moe", m, m.head_dim, moe, qtype=Q.Q8_0)
    print("wrote", out_dir)


if __name__ == "__main__":
    main()
