#!/usr/bin/env python3
"""Writes a tiny random Qwen3 model whose config declares YaRN rope scaling (as Qwen3's
long-context configs do: factor 4 over the original context, beta 32/1, truncated band),
and its golden logits from transformers in f32 with eager attention, in the layout of
gen_tiny_models.py (tests/golden/models/qwen3_yarn).

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_yarn_model.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen3Config

from gen_tiny_models import COMMON, randomize, sequences


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    # A short original context so the positions of the golden sequences cross every band.
    cfg = Qwen3Config(num_hidden_layers=2, head_dim=16, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                       "original_max_position_embeddings": 64},
                      **COMMON)
    out = os.path.join(args.out, "qwen3_yarn")
    os.makedirs(out, exist_ok=True)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model, torch.Generator().manual_seed(2300))
    model.save_pretrained(out, safe_serialization=True)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    seqs = sequences(np.random.default_rng(2301), cfg.vocab_size)
    files = []
    with torch.no_grad():
        for j, ids in enumerate(seqs):
            files.append(f"logits_{j}.f32")
            model(torch.tensor([ids])).logits[0].float().numpy().astype("<f4").tofile(os.path.join(out, files[-1]))
    meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager attention",
            "architecture": "Qwen3ForCausalLM", "vocab_size": cfg.vocab_size, "sequences": seqs, "logits": files}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("qwen3_yarn", [len(s) for s in seqs])


if __name__ == "__main__":
    main()
