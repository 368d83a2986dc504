#!/usr/bin/env python3
# gen_separated_moe.py — the tiny Qwen3-MoE with routing that BF16 rounding cannot flip,
# and its golden logits.
#
# The tiny Qwen3-MoE's random router (tests/gen/gen_tiny_models.py) is nearly uniform over
# its 8 experts: the 2nd and 3rd router scores of a token are often closer than BF16's
# rounding of the activations moves them, so a BF16 device picks another expert now and
# then and its logits leave the f32 CPU's by far more than the kernels' error. This copy
# of its weights (made by transformers) keeps every kernel's work but separates the
# choices: the residual's first `num_experts` dimensions carry a routing code per token
# (the embedding's 4.0 at one dimension, 3.0 at another, 0 elsewhere) that no layer
# writes to (those rows of every o_proj and down_proj are 0), and each MoE layer's router
# reads dimension d as expert perm[d] with weight 2 beside its random weights scaled by
# 0.2. The code dimensions of the residual are then the same on any device, and a token's
# 2nd and 3rd router scores stay apart by more than the script asserts (MIN_MARGIN), far
# above what rounding the rest of the hidden state can move them.
#
# Writes tests/golden/models/qwen3_moe_separated/ (config, f32 safetensors, golden logits
# of qwen3_moe's token sequences) and qwen3_moe_separated_q8_0.gguf (gguf's own Q8_0
# quantizer, experts stacked as llama.cpp's converter does). The golden logits come from
# numpy_llama's float64 forward pass, first checked against transformers' logits of the
# tiny f32 fixtures including qwen3_moe.
#
# usage: gen_separated_moe.py [OUT_DIR]   (default: tests/golden/models)
import json
import os
import shutil
import sys
import types

import numpy as np
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402
from gen_loader_golden import write_gguf_model  # noqa: E402

SRC = "tests/golden/models/qwen3_moe"
NAME = "qwen3_moe_separated"
MIN_MARGIN = 0.5  # least 2nd - 3rd router logit over every token of the golden sequences and every MoE layer


def separate(w, c, rng):
    n = c.num_experts
    emb = w["model.embed_tokens.weight"]
    emb[:, :n] = 0
    for t in range(emb.shape[0]):
        first, second = rng.choice(n, 2, replace=False)
        emb[t, first], emb[t, second] = 4.0, 3.0
    for layer in range(c.num_hidden_layers):
        p = f"model.layers.{layer}."
        for name, a in w.items():
            if name.startswith(p) and name.endswith(("o_proj.weight", "down_proj.weight")):
                a[:n] = 0  # nothing writes the code dimensions of the residual
        w[p + "post_attention_layernorm.weight"][:n] = 1.0
        if p + "mlp.gate.weight" in w:
            router = w[p + "mlp.gate.weight"]
            router *= 0.2
            router[:, :n] = 0
            router[rng.permutation(n), np.arange(n)] = 2.0


def router_margins(w, c, tokens):
    """The least 2nd - 3rd router logit of each MoE layer over the tokens (numpy_llama's pass)."""
    margins = {}
    orig = numpy_llama.moe

    def spy(w_, c_, p, h):
        s = np.sort(h @ w_[p + "mlp.gate.weight"].T, axis=-1)[:, ::-1]
        k = c_.num_experts_per_tok
        margins[p] = min(margins.get(p, np.inf), float((s[:, k - 1] - s[:, k]).min()))
        return orig(w_, c_, p, h)

    numpy_llama.moe = spy
    try:
        numpy_llama.forward(w, c, tokens)
    finally:
        numpy_llama.moe = orig
    return margins


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/models"
    numpy_llama.check_against_transformers()
    with open(os.path.join(SRC, "config.json")) as f:
        c = types.SimpleNamespace(**json.load(f))
    w = load_file(os.path.join(SRC, "model.safetensors"))
    separate(w, c, np.random.default_rng(3000))
    out = os.path.join(out_dir, NAME)
    os.makedirs(out, exist_ok=True)
    save_file(w, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(SRC, f), os.path.join(out, f))
    write_gguf_model(os.path.join(out_dir, NAME + "_q8_0.gguf"), "qwen3moe", c, c.head_dim, w, qtype=Q.Q8_0)

    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    with open(os.path.join(SRC, "golden.json")) as f:
        seqs = json.load(f)["sequences"]
    files = []
    for j, ids in enumerate(seqs):
        numpy_llama.forward(w64, c, ids).astype("<f4").tofile(os.path.join(out, f"logits_{j}.f32"))
        files.append(f"logits_{j}.f32")
        for layer, m in router_margins(w64, c, ids).items():
            assert m >= MIN_MARGIN, f"sequence {j}, {layer}: router margin {m:.3f} < {MIN_MARGIN}"
    every_token = router_margins(w64, c, list(range(c.vocab_size)))
    meta = {"reference": "numpy_llama float64 forward pass (checked against transformers' logits of qwen3_moe)",
            "architecture": "Qwen3MoeForCausalLM", "vocab_size": c.vocab_size, "sequences": seqs, "logits": files,
            "least_router_margin_over_the_vocabulary": {k: round(v, 3) for k, v in every_token.items()}}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", out, meta["least_router_margin_over_the_vocabulary"])


if __name__ == "__main__":
    main()
