#!/usr/bin/env python3
"""Writes the tiny Qwen3-Next model (tests/golden/models/qwen3_next, f32) as a GGUF file the
way llama.cpp's converter writes `qwen3next` (convert_hf_to_gguf.py, Qwen3NextModel over
Qwen2MoeModel), so that sparkd's reading of that layout is held to transformers' golden
logits of the safetensors model (tests/unit/test_cpu_forward.cpp). Unlike qwen35, the value
heads stay grouped by key head as Hugging Face stores them. The layout:
- llama.cpp's tensor names; routed experts stacked ([E, rows, cols]), the shared expert's
  gate a vector; layers of mlp_only_layers keep a dense MLP (ffn_gate/up/down, no router);
- zero-centred norms stored as w + 1 (all but the DeltaNet's gated norm, ssm_norm);
- ssm_a holds -exp(A_log); the dt bias is ssm_dt.bias; conv1d squeezed to [channels, kernel];
- in_proj_qkvz (rows per key-head group g: q_g, k_g, v_g, z_g) split into attn_qkv
  (every q, then every k, then every v) and attn_gate (every z);
- in_proj_ba kept fused as ssm_ba (rows per group: b_g, a_g).

Needs only numpy, safetensors and gguf (the build's venv), and gives the same bytes every
time, so the file is not committed: tests/gen/golden_gguf.py calls write() at test time into
build/golden/models/qwen3_next.gguf, where the tests read it. By hand (writes or refreshes it):
  python tests/gen/gen_qwen3_next_gguf.py [--out build/golden/models]
"""
import argparse
import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

from gen_qwen3_5_gguf import add_hybrid_keys, add_norms_and_attention, add_outer_tensors, add_shared_expert, f32


def write(src, path):
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    t = {k[len("model."):] if k.startswith("model.") else k: v
         for k, v in load_file(os.path.join(src, "model.safetensors")).items() if not k.startswith("mtp.")}
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    per_k = nv // nk
    dense = set(c.get("mlp_only_layers", []))

    w = gguf.GGUFWriter(path, "qwen3next")
    add_hybrid_keys(w, c, dense_ffn=True, rope_sections=False, experts=True, tokenizer_pre="qwen2")
    add_outer_tensors(w, t)
    for layer in range(c["num_hidden_layers"]):
        p, b = f"layers.{layer}.", f"blk.{layer}."
        if not add_norms_and_attention(w, t, c, layer):
            la = p + "linear_attn."
            qkvz = t[la + "in_proj_qkvz.weight"].reshape(nk, 2 * dk + 2 * per_k * dv, -1)
            q, k = qkvz[:, :dk], qkvz[:, dk:2 * dk]
            v, z = qkvz[:, 2 * dk:2 * dk + per_k * dv], qkvz[:, 2 * dk + per_k * dv:]
            flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731
            w.add_tensor(b + "attn_qkv.weight", f32(np.concatenate([flat(q), flat(k), flat(v)])))
            w.add_tensor(b + "attn_gate.weight", f32(flat(z)))
            w.add_tensor(b + "ssm_ba.weight", f32(t[la + "in_proj_ba.weight"]))
            w.add_tensor(b + "ssm_conv1d.weight", f32(t[la + "conv1d.weight"][:, 0, :]))
            w.add_tensor(b + "ssm_a", f32(-np.exp(t[la + "A_log"].astype(np.float64))))
            w.add_tensor(b + "ssm_dt.bias", f32(t[la + "dt_bias"]))
            w.add_tensor(b + "ssm_norm.weight", f32(t[la + "norm.weight"]))
            w.add_tensor(b + "ssm_out.weight", f32(t[la + "out_proj.weight"]))
        if layer in dense:
            for hf, ll in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                w.add_tensor(b + ll + ".weight", f32(t[p + "mlp." + hf + ".weight"]))
            continue
        w.add_tensor(b + "ffn_gate_inp.weight", f32(t[p + "mlp.gate.weight"]))
        for hf, ll in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            w.add_tensor(b + ll + ".weight",
                         f32(np.stack([t[f"{p}mlp.experts.{e}.{hf}.weight"] for e in range(c["num_experts"])])))
        add_shared_expert(w, t, layer)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    import golden_gguf
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(golden_gguf.PLAIN))
    args = ap.parse_args()
    golden_gguf.materialize(args.out, ["qwen3_next.gguf"])
    print(f"{os.path.join(args.out, 'qwen3_next.gguf')}: written (or already up to date)")


if __name__ == "__main__":
    main()
