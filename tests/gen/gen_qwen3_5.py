#!/usr/bin/env python3
"""Writes tiny random-weight Qwen3.5 / Qwen3.6 hybrid models and their golden logits.

Qwen3.5 interleaves Gated DeltaNet layers (linear attention with a short causal conv and
a gated delta-rule recurrent state) with gated full-attention layers (q_proj also yields
an output gate; partial M-RoPE). Checkpoints are vision-language: they carry
"model.visual.*" tensors that a text-only server must skip. Two models:
  qwen3_5_moe  Qwen3_5MoeForConditionalGeneration: routed experts top-2 of 8 plus a
               sigmoid-gated shared expert in every layer, untied lm_head
  qwen3_5      Qwen3_5ForConditionalGeneration: dense SwiGLU MLP, tied embeddings

Same layout as gen_tiny_models.py, under tests/golden/models/<name>/:
  config.json, model.safetensors   (save_pretrained, f32)
  golden.json                      token sequences and, per sequence, the logits file name
  logits_<i>.f32                   [len, vocab] little-endian f32 logits of sequence i

The reference is transformers in f32 on the CPU, eager attention, each sequence in one
forward without a cache (DeltaNet layers then run transformers' chunked gated delta rule,
chunks of 64). The script also feeds every sequence one token at a time through the cache
(the recurrent rule) and fails unless both agree; only the one-forward logits are stored.

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_qwen3_5.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3_5MoeConfig,
                          Qwen3_5MoeForConditionalGeneration)

VOCAB = 256
SEQUENCE_LENGTHS = (1, 7, 70, 130)  # 70 and 130 cross transformers' 64-token chunks
RECURRENT_TOLERANCE = 1e-4

# Rotary dims = head_dim * partial_rotary_factor = 8, so mrope_section sums to 4. Text
# positions are equal in all three M-RoPE axes, so for text it is plain 1-D RoPE on the
# first 8 dims of each head (rotate-half pairing within those 8).
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1], "mrope_interleaved": True}

TEXT = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
            max_position_embeddings=256, rope_parameters=ROPE, bos_token_id=1, eos_token_id=2)

# A tiny vision tower, present only so the checkpoint holds
# "model.visual.*" tensors, as published Qwen3.5 checkpoints do.
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2,
              temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
              num_position_embeddings=16)

VISION_PREFIX = "model.visual."


def configs():
    return {
        "qwen3_5_moe": Qwen3_5MoeConfig(
            text_config=dict(TEXT, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_expert_intermediate_size=48, tie_word_embeddings=False),
            vision_config=VISION, tie_word_embeddings=False),
        "qwen3_5": Qwen3_5Config(
            text_config=dict(TEXT, intermediate_size=128, tie_word_embeddings=True),
            vision_config=VISION, tie_word_embeddings=True),
    }


def randomize(model, gen):
    # transformers' own init (std 0.02, zero-centred norms at 0, A_log spread to 16)
    # gives near-constant logits and DeltaNet states that forget within a token or two;
    # scaled random weights make every term of the forward pass matter.
    def randn(shape):
        return torch.randn(shape, generator=gen)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                # Gated RMSNorm multiplies by the weight itself.
                p.copy_(1.0 + 0.2 * randn(p.shape))
            elif name.endswith("layernorm.weight") or name.endswith("q_norm.weight") \
                    or name.endswith("k_norm.weight") or name == "model.language_model.norm.weight":
                # Zero-centred RMSNorm: the forward multiplies by (1 + weight).
                p.copy_(0.2 * randn(p.shape))
            elif name.endswith("A_log"):
                # Decay rates exp(A_log) between 0.02 and 1 per head: some heads keep their
                # state across a 64-token chunk boundary, some forget it quickly.
                p.copy_(torch.log(0.02 + 0.98 * torch.rand(p.shape, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * randn(p.shape))
            elif name.endswith("conv1d.weight"):
                p.copy_(randn(p.shape) / (p.shape[-1] ** 0.5))
            elif name.endswith("norm.weight") or name.endswith("norm1.weight") \
                    or name.endswith("norm2.weight"):
                p.copy_(1.0 + 0.2 * randn(p.shape))  # vision LayerNorms
            elif name.endswith(".bias"):
                p.copy_(0.2 * randn(p.shape))
            elif "embed_tokens" in name:
                p.copy_(randn(p.shape))
            else:
                p.copy_(randn(p.shape) / (p.shape[-1] ** 0.5))


def sequences(rng):
    return [rng.integers(3, VOCAB, size=n).tolist() for n in SEQUENCE_LENGTHS]


def recurrent_logits(model, ids):
    # One token a time through the cache: DeltaNet layers take the recurrent rule and the
    # conv state update, attention layers read the KV cache.
    cache, rows = None, []
    for t in range(len(ids)):
        out = model(torch.tensor([ids[t:t + 1]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1])
    return torch.stack(rows).float().numpy()


def fuse_experts(model, path):
    # transformers 5.23's save_pretrained splits the experts into per-expert
    # "experts.<e>.{gate,up,down}_proj.weight" tensors, but published Qwen3.5 MoE
    # checkpoints store them stacked, as the model holds them:
    #   experts.gate_up_proj [E, 2 * I, H]  (rows [0, I) gate, [I, 2I) up, per expert)
    #   experts.down_proj    [E, H, I]
    # Rewrite the file in the published layout.
    tensors = {k: v for k, v in load_file(path).items() if ".mlp.experts." not in k}
    for k, v in model.state_dict().items():
        if k.endswith(".mlp.experts.gate_up_proj") or k.endswith(".mlp.experts.down_proj"):
            tensors[k] = v.detach().contiguous().clone()
    save_file(dict(sorted(tensors.items())), path, metadata={"format": "pt"})


def router_margin(model, ids):
    # The least gap, over tokens and layers, between the 2nd and 3rd router logits: how
    # far an implementation's rounding may move them before it routes to another expert.
    gaps = []

    def record(module, inputs, outputs):
        top = outputs[0].topk(3, dim=-1).values  # outputs[0]: router logits [tokens, E]
        gaps.append((top[:, 1] - top[:, 2]).min().item())

    hooks = [m.register_forward_hook(record) for m in model.modules()
             if type(m).__name__.endswith("TopKRouter")]
    model(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def check_saved(model, path):
    # The file must hold exactly the weights the reference ran with.
    state = model.state_dict()
    with safe_open(path, "pt") as f:
        names = list(f.keys())
        for name in names:
            assert name in state, name
            assert torch.equal(f.get_tensor(name), state[name]), name
        for name in names:
            print(f"  {name} {list(f.get_slice(name).get_shape())}")
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, cfg) in enumerate(configs().items()):
        gen = torch.Generator().manual_seed(3000 + i)
        cls = Qwen3_5MoeForConditionalGeneration if name.endswith("_moe") else Qwen3_5ForConditionalGeneration
        model = cls(cfg).to(torch.float32)
        randomize(model, gen)
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        if name.endswith("_moe"):
            fuse_experts(model, os.path.join(out, "model.safetensors"))
        model = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        print(name, type(model).__name__)
        names = check_saved(model, os.path.join(out, "model.safetensors"))
        vision = [n for n in names if n.startswith(VISION_PREFIX)]
        assert vision, "expected vision tensors in the checkpoint"
        rng = np.random.default_rng(4000 + i)
        seqs = sequences(rng)
        files = []
        margins = []
        with torch.no_grad():
            for j, ids in enumerate(seqs):
                logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
                stepped = recurrent_logits(model, ids)
                scale = np.abs(logits).max()
                last_err = np.abs(stepped[-1] - logits[-1]).max() / np.abs(logits[-1]).max()
                all_err = np.abs(stepped - logits).max() / scale
                print(f"  seq {j} len {len(ids)}: logits max |x| {scale:.3f}, std {logits.std():.3f}; "
                      f"recurrent vs chunked rel err: last token {last_err:.2e}, all tokens {all_err:.2e}")
                assert last_err < RECURRENT_TOLERANCE and all_err < RECURRENT_TOLERANCE, (name, j)
                margin = router_margin(model, ids)
                if margin is not None:
                    margins.append(margin)
                    print(f"  seq {j}: least router logit gap between 2nd and 3rd expert {margin:.2e}")
                fname = f"logits_{j}.f32"
                logits.astype("<f4").tofile(os.path.join(out, fname))
                files.append(fname)
        meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                             f"f32, eager attention",
                "architecture": cfg.architectures[0] if cfg.architectures else type(model).__name__,
                "vocab_size": VOCAB, "sequences": seqs, "logits": files,
                "notes": (f"Logits from one forward over the whole sequence without a cache (chunked "
                          f"gated delta rule, 64-token chunks); a token-by-token cached run (recurrent "
                          f"rule) agrees within {RECURRENT_TOLERANCE} relative. The {len(vision)} tensors "
                          f"named '{VISION_PREFIX}*' belong to the vision tower and must be skipped by a "
                          f"text-only loader; all others are the language model "
                          f"('model.language_model.*', and 'lm_head.weight' when untied).")}
        if margins:
            meta["notes"] += (f" Experts are stored stacked (experts.gate_up_proj [E, 2I, H], gate rows "
                              f"first; experts.down_proj [E, H, I]). Least gap between a token's 2nd and "
                              f"3rd router logits over all sequences and layers: {min(margins):.2e}.")
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(name, [len(s) for s in seqs])


if __name__ == "__main__":
    main()
