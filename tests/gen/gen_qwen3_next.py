#!/usr/bin/env python3
"""Writes a tiny random-weight Qwen3-Next model (Qwen3NextForCausalLM) and its golden logits.

Qwen3-Next (Qwen3-Next-80B-A3B) is the text-only forerunner of Qwen3.5's hybrid: the same
Gated DeltaNet and gated full-attention layers, routed experts beside a sigmoid-gated
shared expert, zero-centred RMSNorm. Its checkpoints differ in layout: settings at the top
level of config.json; each DeltaNet layer's projections fused per key-head group
(in_proj_qkvz: for each of the linear_num_key_heads groups, its q, k, v and z rows;
in_proj_ba: each group's b then a rows); experts stored one by one
(mlp.experts.<e>.{gate,up,down}_proj), as transformers' save_pretrained writes them and the
published checkpoints hold them. Two MoE layers and two dense ones (mlp_only_layers), so
both MLP kinds are read.

Same files as gen_qwen3_5.py (whose helpers it uses), under tests/golden/models/qwen3_next/,
checked the same way: one forward per sequence (chunked gated delta rule) against a
token-by-token cached run (recurrent rule).

qwen3_next_fp8 is the same model as an FP8 checkpoint, as Qwen3-Next-80B-A3B-Instruct-FP8
ships: every projection matrix (the fused DeltaNet ones included; not the router, the shared
expert's gate, the conv, norms, embeddings or LM head) e4m3 with weight_scale_inv block
scales, weight_block_size [16, 16] here (each key-head group's runs are whole blocks, as
128-row blocks are in the 80B), quantized by gen_fp8_models.py's quantizer. Its golden
logits are transformers' forward with those weights replaced by e4m3 x scale.

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_qwen3_next.py [--out tests/golden/models]
"""
import argparse
import json
import os
import re

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

import gen_fp8_models as fp8
import gen_qwen3_5 as q35

ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}

CONFIG = dict(vocab_size=q35.VOCAB, hidden_size=64, num_hidden_layers=4,
              layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
              num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=8, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
              max_position_embeddings=256, rope_parameters=ROPE, bos_token_id=1, eos_token_id=2,
              num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=48, intermediate_size=96, decoder_sparse_step=1,
              mlp_only_layers=[1, 3], norm_topk_prob=True, tie_word_embeddings=False)


def check_saved(model, path):
    # The file must hold exactly the weights the reference ran with; the model keeps the
    # experts stacked (gate_up_proj [E, 2I, H], gate rows first; down_proj [E, H, I]), the
    # file one by one.
    state = model.state_dict()
    names = []
    with safe_open(path, "pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            m = re.fullmatch(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
            if m:
                prefix, e, kind = m.group(1), int(m.group(2)), m.group(3)
                if kind == "down":
                    want = state[prefix + ".down_proj"][e]
                else:
                    gate_up = state[prefix + ".gate_up_proj"][e]
                    half = gate_up.shape[0] // 2
                    want = gate_up[:half] if kind == "gate" else gate_up[half:]
            else:
                want = state[name]
            assert torch.equal(t, want), name
            names.append(name)
    return names


FP8_BLOCK = (16, 16)
FP8_QUANTIZED = re.compile(r".*\.(in_proj_qkvz|in_proj_ba|out_proj|[qkvo]_proj|gate_proj|up_proj|down_proj)\.weight")


def golden_logits(model, out, seqs, files):
    with torch.no_grad():
        for j, ids in enumerate(seqs):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
            logits.astype("<f4").tofile(os.path.join(out, files[j]))


def write_fp8(model, f32_dir, out, seqs, files):
    """The FP8 checkpoint of the model in f32_dir, and logits of the model with its weights
    replaced by their dequantized values."""
    os.makedirs(out, exist_ok=True)
    stored, dequantized = {}, {}
    with safe_open(os.path.join(f32_dir, "model.safetensors"), "np") as f:
        for name in f.keys():
            a = f.get_tensor(name).astype(np.float32)
            if FP8_QUANTIZED.fullmatch(name):
                q, scale = fp8.quantize(a, FP8_BLOCK)
                stored[name] = ("F8_E4M3", q.shape, q.tobytes())
                stored[name + "_scale_inv"] = ("F32", scale.shape, scale.astype("<f4").tobytes())
                dequantized[name] = fp8.dequantize(q, scale, FP8_BLOCK).astype(np.float32)
            else:
                stored[name] = ("F32", a.shape, a.astype("<f4").tobytes())
    fp8.write_safetensors(os.path.join(out, "model.safetensors"), stored)
    cfg = json.loads(open(os.path.join(f32_dir, "config.json")).read())
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": list(FP8_BLOCK)}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # The reference: the f32 model with the quantized matrices' dequantized values.
    state = model.state_dict()
    with torch.no_grad():
        for name, a in dequantized.items():
            m = re.fullmatch(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
            t = torch.from_numpy(a)
            if not m:
                state[name].copy_(t)
            elif m.group(3) == "down":
                state[m.group(1) + ".down_proj"][int(m.group(2))].copy_(t)
            else:
                gate_up = state[m.group(1) + ".gate_up_proj"][int(m.group(2))]
                half = gate_up.shape[0] // 2
                (gate_up[:half] if m.group(3) == "gate" else gate_up[half:]).copy_(t)
    golden_logits(model, out, seqs, files)
    meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager "
                         f"attention, quantized matrices replaced by e4m3 x scale",
            "architecture": "Qwen3NextForCausalLM", "vocab_size": q35.VOCAB, "sequences": seqs, "logits": files,
            "notes": f"{len(dequantized)} matrices in e4m3 with {FP8_BLOCK[0]}x{FP8_BLOCK[1]} block scales "
                     f"(weight_scale_inv, f32), the fused DeltaNet projections among them; the rest f32."}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("qwen3_next_fp8:", len(dequantized), "matrices in e4m3")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = Qwen3NextConfig(**CONFIG)
    gen = torch.Generator().manual_seed(3100)
    model = Qwen3NextForCausalLM(cfg).to(torch.float32)
    q35.randomize(model, gen)  # Qwen3.5's scaled random weights: the parameter names match
    out = os.path.join(args.out, "qwen3_next")
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    model = Qwen3NextForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    print("qwen3_next", type(model).__name__)
    names = check_saved(model, os.path.join(out, "model.safetensors"))
    assert any(".in_proj_qkvz." in n for n in names) and any(".mlp.experts.0.gate_proj." in n for n in names), \
        "expected fused DeltaNet projections and per-expert tensors"
    rng = np.random.default_rng(4100)
    seqs = q35.sequences(rng)
    files, margins = [], []
    with torch.no_grad():
        for j, ids in enumerate(seqs):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
            stepped = q35.recurrent_logits(model, ids)
            scale = np.abs(logits).max()
            all_err = np.abs(stepped - logits).max() / scale
            print(f"  seq {j} len {len(ids)}: logits max |x| {scale:.3f}, std {logits.std():.3f}; "
                  f"recurrent vs chunked rel err, all tokens {all_err:.2e}")
            assert all_err < q35.RECURRENT_TOLERANCE, j
            margin = q35.router_margin(model, ids)
            if margin is not None:
                margins.append(margin)
            fname = f"logits_{j}.f32"
            logits.astype("<f4").tofile(os.path.join(out, fname))
            files.append(fname)
    meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager attention",
            "architecture": "Qwen3NextForCausalLM", "vocab_size": q35.VOCAB, "sequences": seqs, "logits": files,
            "notes": (f"Logits from one forward over the whole sequence without a cache (chunked gated delta "
                      f"rule, 64-token chunks); a token-by-token cached run agrees within "
                      f"{q35.RECURRENT_TOLERANCE} relative. DeltaNet projections fused per key-head group "
                      f"(in_proj_qkvz, in_proj_ba); experts stored one by one; layers 1 and 3 dense "
                      f"(mlp_only_layers). Least gap between a token's 2nd and 3rd router logits over all "
                      f"sequences and MoE layers: {min(margins):.2e}.")}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("qwen3_next", [len(s) for s in seqs])
    write_fp8(model, out, os.path.join(args.out, "qwen3_next_fp8"), seqs, files)


if __name__ == "__main__":
    main()
