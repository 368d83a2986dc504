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

Needs only numpy, safetensors and gguf (the build's venv):
  python tests/gen/gen_qwen3_next_gguf.py [--out tests/golden/models]
"""
import argparse
import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

from gen_qwen3_5_gguf import byte_char


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
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    rope = c["rope_parameters"]
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_rope_dimension_count(int(c["head_dim"] * rope["partial_rotary_factor"]))
    interval = c["layer_types"].index("full_attention") + 1
    assert all((t_ == "full_attention") == ((i + 1) % interval == 0) for i, t_ in enumerate(c["layer_types"]))
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(c["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(nv * dv)
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    w.add_file_type(0)  # ALL_F32
    assert c["vocab_size"] == 256
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([byte_char(b) for b in range(256)])
    w.add_token_types([3 if i in (c["bos_token_id"], c["eos_token_id"]) else 1 for i in range(256)])
    w.add_token_merges([])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])

    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", f32(t["embed_tokens.weight"]))
    w.add_tensor("output.weight", f32(t["lm_head.weight"]))
    w.add_tensor("output_norm.weight", f32(t["norm.weight"] + 1))
    for layer in range(c["num_hidden_layers"]):
        p, b = f"layers.{layer}.", f"blk.{layer}."
        w.add_tensor(b + "attn_norm.weight", f32(t[p + "input_layernorm.weight"] + 1))
        w.add_tensor(b + "post_attention_norm.weight", f32(t[p + "post_attention_layernorm.weight"] + 1))
        if c["layer_types"][layer] == "full_attention":
            for hf, ll in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                w.add_tensor(b + ll + ".weight", f32(t[p + "self_attn." + hf + ".weight"]))
            w.add_tensor(b + "attn_q_norm.weight", f32(t[p + "self_attn.q_norm.weight"] + 1))
            w.add_tensor(b + "attn_k_norm.weight", f32(t[p + "self_attn.k_norm.weight"] + 1))
        else:
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
        for hf, ll in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
            w.add_tensor(b + ll + ".weight", f32(t[p + "mlp.shared_expert." + hf + ".weight"]))
        w.add_tensor(b + "ffn_gate_inp_shexp.weight", f32(t[p + "mlp.shared_expert_gate.weight"][0]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/models")
    args = ap.parse_args()
    src = os.path.join(args.out, "qwen3_next")
    path = os.path.join(args.out, "qwen3_next.gguf")
    write(src, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
