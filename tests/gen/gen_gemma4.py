#!/usr/bin/env python3
"""Writes two tiny random-weight Gemma 4 text models (Gemma4ForCausalLM) and their golden logits.

Gemma 4's decoder, as transformers' modeling_gemma4 defines it (the 31B and 26B-A4B text
towers; no per-layer input embeddings, no KV sharing between layers):
  - the embedding scaled by sqrt(hidden_size); four RMSNorms a layer with weights used as
    they are (not 1 + w), in sandwich placement; the final norm, the tied LM head and the
    final logit soft cap;
  - sliding layers (window 8, shorter than the longer sequences) with their own KV heads x
    head_dim and the default RoPE; full ("global") layers with global_head_dim and, where
    attention_k_eq_v, num_global_key_value_heads and no v_proj (the value is the key
    projection through a weightless RMSNorm, before k_norm and RoPE); proportional RoPE on
    the full layers (a quarter of the frequency pairs turn, over NeoX halves of the whole
    head, exponents over the whole head_dim);
  - q and k normed per head, v by a weightless RMSNorm; the attention scale 1.0;
  - a GELU-tanh gated MLP; each layer's output multiplied by its layer_scalar;
  - in the MoE model, each layer's dense MLP and routed experts in parallel: the router
    reads the un-normed residual (a weightless RMSNorm, times router.scale and
    hidden_size^-1/2), softmax over all experts, top-k renormalised, times per_expert_scale;
    the experts (fused gate_up_proj) read pre_feedforward_layernorm_2 of the residual; the
    two branches normed apart (post_feedforward_layernorm_1 / _2), added, then normed by
    post_feedforward_layernorm.
The head widths are the real models' scaled down together: sliding 16, global 32 (256 and
512 in the 31B), 2 KV heads on sliding layers and 1 on global ones (16 and 4 there; the
MoE model's global layers keep 2, as transformers reads a config without K = V).

Under tests/golden/models/gemma4/ (dense, K = V global layers) and gemma4_moe/ (the MoE
block, and global layers with a v_proj: attention_k_eq_v false):
  config.json, generation_config.json, model.safetensors (BF16 weights)
  golden.json      token sequences and, per sequence, the logits file name
  logits_<i>.f32   [len, vocab] little-endian f32 logits of sequence i

The reference is transformers in f32 on the CPU (the BF16 weights read back and widened),
eager attention, each sequence in one forward without a cache; a token-by-token pass
through its cache must give the same logits.

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_gemma4.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

from gen_gemma3 import logits_of, stepwise

VOCAB = 128
WINDOW = 8
SOFTCAP = 30.0
SEQUENCE_LENGTHS = (1, 7, 23, 40)  # the shapes tests/unit/test_cpu_forward.cpp's kModels expect
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}


def config(moe):
    extra = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32) if moe else {}
    return Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=None if moe else 1, attention_k_eq_v=not moe,
        sliding_window=WINDOW, layer_types=list(LAYER_TYPES), rope_parameters=json.loads(json.dumps(ROPE)),
        max_position_embeddings=256, rms_norm_eps=1e-6, final_logit_softcapping=SOFTCAP,
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, use_double_wide_mlp=False,
        tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0, **extra)


def random_state(model, gen):
    state = {}
    for name, p in model.state_dict().items():
        shape = tuple(p.shape)
        if name.endswith("norm.weight") or name.endswith("router.scale"):
            v = 1.0 + 0.3 * torch.randn(shape, generator=gen)  # used as w, not 1 + w
        elif name.endswith("layer_scalar") or name.endswith("per_expert_scale"):
            v = 0.5 + torch.rand(shape, generator=gen)
        elif "embed_tokens" in name:
            v = torch.randn(shape, generator=gen) * 0.5
        else:
            v = torch.randn(shape, generator=gen) / (shape[-1] ** 0.5)
        state[name] = v.to(torch.bfloat16)
    return state


def write_model(out, cfg, seed):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(cfg)
    state = random_state(model, torch.Generator().manual_seed(seed))
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    d.pop("per_layer_config", None)  # derived from the keys below when read back
    d["global_head_dim"] = 32
    # Only K = V models have KV heads of their own on the full layers (transformers ignores
    # the key otherwise; llama.cpp's converter would write it as if it counted).
    d["num_global_key_value_heads"] = 1 if cfg.attention_k_eq_v else None
    d["architectures"] = ["Gemma4ForCausalLM"]
    d["dtype"] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0}, f)

    model = Gemma4ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    got = model.state_dict()
    for name, v in state.items():
        if name != "lm_head.weight":
            assert torch.equal(got[name], v.float()), f"transformers read {name} back differently"
    assert torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"]), "the head is not tied"
    c = model.config
    assert c.layer_types == LAYER_TYPES and c.sliding_window == WINDOW
    for i, t in enumerate(LAYER_TYPES):
        attn = model.model.layers[i].self_attn
        assert attn.head_dim == (32 if t == "full_attention" else 16), (i, attn.head_dim)
        assert (attn.v_proj is None) == (t == "full_attention" and cfg.attention_k_eq_v), i
        assert attn.scaling == 1.0
    assert c.rope_parameters["full_attention"]["rope_type"] == "proportional", c.rope_parameters

    rng = np.random.default_rng(seed + 1)
    seqs = [rng.integers(3, VOCAB, size=n).tolist() for n in SEQUENCE_LENGTHS]
    files = []
    for j, ids in enumerate(seqs):
        logits = logits_of(model, ids)
        step = stepwise(model, ids)
        assert torch.allclose(logits, step, atol=1e-4, rtol=0), f"cached pass differs on sequence {j}"
        files.append(f"logits_{j}.f32")
        logits.numpy().astype("<f4").tofile(os.path.join(out, files[-1]))
    reference = f"transformers {transformers.__version__}, torch {torch.__version__}, f32 from BF16 weights, eager attention"
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference, "architecture": "Gemma4ForCausalLM", "vocab_size": VOCAB,
                   "sequences": seqs, "logits": files}, f, indent=1)
    print(os.path.basename(out), [len(s) for s in seqs], "max |logit|", float(logits.abs().max()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    write_model(os.path.join(args.out, "gemma4"), config(moe=False), 4400)
    write_model(os.path.join(args.out, "gemma4_moe"), config(moe=True), 4500)


if __name__ == "__main__":
    main()
