#!/usr/bin/env python3
"""Writes tiny random-weight models of each supported architecture and their golden logits.

The reference is Hugging Face transformers running in f32 on the CPU. For each model it
writes, under tests/golden/models/<name>/:
  config.json, model.safetensors   (save_pretrained; f32, or bf16 for *_bf16)
  golden.json                      token sequences and, per sequence, the logits file name
  logits_<i>.f32                   [len, vocab] little-endian f32 logits of sequence i

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_tiny_models.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config,
                          Qwen3MoeConfig)

COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)


def configs():
    return {
        # Llama 3 rope scaling with a small original context so every band of the
        # frequency blend (kept, smoothed, slowed) is exercised at head_dim 16.
        "llama": LlamaConfig(num_hidden_layers=2, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                              "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64},
                             **COMMON),
        # q/k/v biases and tied embeddings.
        "qwen2": Qwen2Config(num_hidden_layers=2, tie_word_embeddings=True,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                             **COMMON),
        # Per-head q/k norm and an explicit head_dim different from hidden / heads.
        "qwen3": Qwen3Config(num_hidden_layers=2, head_dim=32, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                             **COMMON),
        # Experts top-2 of 8 with normalized weights; layer 1 is a dense MLP (mlp_only_layers).
        "qwen3_moe": Qwen3MoeConfig(num_hidden_layers=3, head_dim=16, tie_word_embeddings=False,
                                    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                    norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                    **COMMON),
        # The same architecture as qwen3 but stored in bf16: checks the bf16 weight path.
        "qwen3_bf16": Qwen3Config(num_hidden_layers=2, head_dim=16, tie_word_embeddings=True,
                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                  **COMMON),
    }


def randomize(model, gen):
    # transformers' own init (std 0.02, norms at 1) gives near-constant logits; scaled
    # random weights make every term of the forward pass matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / (p.shape[-1] ** 0.5))


def hub_style_config(path):
    # transformers 5 writes Qwen3-MoE's expert count as "num_local_experts"; published
    # Qwen3-MoE checkpoints say "num_experts". Write the published form (transformers reads
    # both), so the test models look like the files users have.
    with open(path) as f:
        cfg = json.load(f)
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)


def sequences(rng, vocab):
    # Lengths cover one token, less than a block, and several blocks of 16.
    return [rng.integers(3, vocab, size=n).tolist() for n in (1, 7, 23, 40)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, cfg) in enumerate(configs().items()):
        gen = torch.Generator().manual_seed(1000 + i)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        randomize(model, gen)
        if name.endswith("_bf16"):
            # Round the weights to bf16 so the golden f32 run sees exactly the stored values.
            model = model.to(torch.bfloat16)
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        hub_style_config(os.path.join(out, "config.json"))
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        model.config._attn_implementation = "eager"
        rng = np.random.default_rng(2000 + i)
        seqs = sequences(rng, cfg.vocab_size)
        files = []
        with torch.no_grad():
            for j, ids in enumerate(seqs):
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
                fname = f"logits_{j}.f32"
                logits.astype("<f4").tofile(os.path.join(out, fname))
                files.append(fname)
        meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager attention",
                "architecture": cfg.architectures[0] if cfg.architectures else type(model).__name__,
                "vocab_size": cfg.vocab_size, "sequences": seqs, "logits": files}
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(name, type(model).__name__, [len(s) for s in seqs])


if __name__ == "__main__":
    main()
