#!/usr/bin/env python3
"""Writes the tiny Qwen3.5 models (tests/golden/models/qwen3_5 and qwen3_5_moe, f32) as GGUF
files the way llama.cpp's converter writes `qwen35` / `qwen35moe`, and checks each file with an
independent reader: transformers loads it (its GGUF integration undoes llama.cpp's layout) and
must give the golden logits of the safetensors model.

llama.cpp's layout, as transformers' GGUF conversion mapping for qwen35 describes it:
- llama.cpp's tensor names (blk.N.attn_qkv, ssm_a, ssm_conv1d, ...; experts stacked);
- zero-centred norms stored as w + 1 (all but the DeltaNet's gated norm, ssm_norm);
- ssm_a holds -exp(A_log); the dt bias is ssm_dt.bias; conv1d squeezed to [channels, kernel];
- value heads tiled rather than grouped by key head: head j of key head k sits at
  j * num_key_heads + k, on every tensor with a row per value head or value element (the v
  rows of attn_qkv and ssm_conv1d, attn_gate, ssm_alpha, ssm_beta, ssm_a, ssm_dt) and on the
  columns of ssm_out;
- the shared expert's gate as a vector;
- an MTP head (the source's "mtp.*", as llama.cpp's converter writes it since its MTP support):
  one more block after the layers (block_count counts it, nextn_predict_layers = 1) holding
  mtp.layers.0 under the usual names and mtp.fc, the two pre-fc norms and mtp.norm as
  nextn.eh_proj, nextn.enorm, nextn.hnorm and nextn.shared_head_norm, every norm with the one
  added.

The files are not committed: write() needs only numpy, safetensors and gguf (the build's
venv), gives the same bytes every time, and tests/gen/golden_gguf.py calls it at test time
into build/golden/models (qwen3_5.gguf, qwen3_5_moe.gguf, qwen3_5_moe_mtp.gguf), where the
tests read them.
Run by hand where torch, and accelerate (transformers' GGUF loading needs it), are installed
(CI has neither) to write them the same way and check them against transformers:
  python tests/gen/gen_qwen3_5_gguf.py [--out build/golden/models]
"""
import argparse
import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

TEXT = "model.language_model."


def byte_char(b):
    """GPT-2's printable character for byte b (byte-level BPE)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if x not in printable))


def tiled(a, num_k, per_k, dim, offset=0):
    """Rows [offset, offset + num_k * per_k * dim) reordered from grouped (key head, then
    value head within it) to tiled (value head within, then key head)."""
    n = num_k * per_k * dim
    block = a[offset:offset + n].reshape(num_k, per_k, dim, *a.shape[1:])
    out = a.copy()
    out[offset:offset + n] = block.transpose(1, 0, 2, *range(3, block.ndim)).reshape(n, *a.shape[1:])
    return out


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def add_attention_keys(w, c):
    """The attention's head counts and sizes and the RMSNorm epsilon (c: the text config)."""
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])


def add_hybrid_keys(w, c, dense_ffn, rope_sections, experts, tokenizer_pre, mtp_layers=0):
    """The metadata llama.cpp's converter writes for both hybrids (c: the text config), and a
    byte-level tokenizer (each of the 256 ids one byte, as GPT-2 spells bytes) under
    `tokenizer_pre`, so that any text encodes; the golden tests feed ids."""
    nk, nv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    w.add_block_count(c["num_hidden_layers"] + mtp_layers)
    if mtp_layers:
        w.add_nextn_predict_layers(mtp_layers)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    if dense_ffn:
        w.add_feed_forward_length(c["intermediate_size"])
    add_attention_keys(w, c)
    rope = c["rope_parameters"]
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_rope_dimension_count(int(c["head_dim"] * rope["partial_rotary_factor"]))
    if rope_sections:
        w.add_rope_dimension_sections(list(rope["mrope_section"]) + [0] * (4 - len(rope["mrope_section"])))
    interval = c["layer_types"].index("full_attention") + 1
    assert all((t_ == "full_attention") == ((i + 1) % interval == 0) for i, t_ in enumerate(c["layer_types"]))
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(c["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(nv * dv)
    if experts:
        w.add_expert_count(c["num_experts"])
        w.add_expert_used_count(c["num_experts_per_tok"])
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    w.add_file_type(0)  # ALL_F32
    assert c["vocab_size"] == 256
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(tokenizer_pre)
    w.add_token_list([byte_char(b) for b in range(256)])
    w.add_token_types([3 if i in (c["bos_token_id"], c["eos_token_id"]) else 1 for i in range(256)])
    w.add_token_merges([])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])


def add_outer_tensors(w, t):
    """The embedding, the LM head when untied, and the final norm (t: text-model tensors
    without their "model." prefix)."""
    w.add_tensor("token_embd.weight", f32(t["embed_tokens.weight"]))
    if "lm_head.weight" in t:
        w.add_tensor("output.weight", f32(t["lm_head.weight"]))
    w.add_tensor("output_norm.weight", f32(t["norm.weight"] + 1))


def add_norms_and_attention(w, t, c, layer, block=None):
    """A layer's two norms and, in a full-attention layer, its attention; whether it was one.
    `block`: the GGUF block it is written as (the layer's own index unless given)."""
    p, b = f"layers.{layer}.", f"blk.{layer if block is None else block}."
    w.add_tensor(b + "attn_norm.weight", f32(t[p + "input_layernorm.weight"] + 1))
    w.add_tensor(b + "post_attention_norm.weight", f32(t[p + "post_attention_layernorm.weight"] + 1))
    if block is None and c["layer_types"][layer] != "full_attention":
        return False
    for hf, ll in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
        w.add_tensor(b + ll + ".weight", f32(t[p + "self_attn." + hf + ".weight"]))
    w.add_tensor(b + "attn_q_norm.weight", f32(t[p + "self_attn.q_norm.weight"] + 1))
    w.add_tensor(b + "attn_k_norm.weight", f32(t[p + "self_attn.k_norm.weight"] + 1))
    return True


def add_shared_expert(w, t, layer, block=None):
    """A layer's shared expert, its gate as a vector."""
    p, b = f"layers.{layer}.", f"blk.{layer if block is None else block}."
    for hf, ll in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
        w.add_tensor(b + ll + ".weight", f32(t[p + "mlp.shared_expert." + hf + ".weight"]))
    w.add_tensor(b + "ffn_gate_inp_shexp.weight", f32(t[p + "mlp.shared_expert_gate.weight"][0]))


def add_experts(w, t, c, layer, block=None):
    """A layer's router, its stacked experts (gate and up split) and its shared expert."""
    p, b = f"layers.{layer}.", f"blk.{layer if block is None else block}."
    w.add_tensor(b + "ffn_gate_inp.weight", f32(t[p + "mlp.gate.weight"]))
    gate_up, inter = t[p + "mlp.experts.gate_up_proj"], c["moe_intermediate_size"]
    w.add_tensor(b + "ffn_gate_exps.weight", f32(gate_up[:, :inter]))
    w.add_tensor(b + "ffn_up_exps.weight", f32(gate_up[:, inter:]))
    w.add_tensor(b + "ffn_down_exps.weight", f32(t[p + "mlp.experts.down_proj"]))
    add_shared_expert(w, t, layer, block)


def add_mtp_block(w, mtp, c, moe):
    """The MTP head as block num_hidden_layers: its decoder layer (a full-attention layer)
    under the usual names, and its own parts as blk.N.nextn.* (mtp: the head's tensors
    without their "mtp." prefix, its layer as "layers.0.")."""
    block = c["num_hidden_layers"]
    add_norms_and_attention(w, mtp, c, 0, block)
    if moe:
        add_experts(w, mtp, c, 0, block)
    else:
        for hf, ll in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            w.add_tensor(f"blk.{block}.{ll}.weight", f32(mtp["layers.0.mlp." + hf + ".weight"]))
    nextn = f"blk.{block}.nextn."
    w.add_tensor(nextn + "eh_proj.weight", f32(mtp["fc.weight"]))
    w.add_tensor(nextn + "enorm.weight", f32(mtp["pre_fc_norm_embedding.weight"] + 1))
    w.add_tensor(nextn + "hnorm.weight", f32(mtp["pre_fc_norm_hidden.weight"] + 1))
    w.add_tensor(nextn + "shared_head_norm.weight", f32(mtp["norm.weight"] + 1))


def write(src, path, arch):
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)["text_config"]
    tensors = load_file(os.path.join(src, "model.safetensors"))
    t = {k[len(TEXT):] if k.startswith(TEXT) else k: v for k, v in tensors.items()
         if not k.startswith("model.visual.") and not k.startswith("mtp.")}
    mtp = {k[len("mtp."):]: v for k, v in tensors.items() if k.startswith("mtp.")}
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    per_k, dk, dv = nv // nk, c["linear_key_head_dim"], c["linear_value_head_dim"]
    key_rows = 2 * nk * dk
    moe = arch == "qwen35moe"

    w = gguf.GGUFWriter(path, arch)
    add_hybrid_keys(w, c, dense_ffn=not moe, rope_sections=True, experts=moe, tokenizer_pre="qwen35",
                    mtp_layers=1 if mtp else 0)

    add_outer_tensors(w, t)
    for layer in range(c["num_hidden_layers"]):
        p, b = f"layers.{layer}.", f"blk.{layer}."
        if not add_norms_and_attention(w, t, c, layer):
            la = p + "linear_attn."
            w.add_tensor(b + "attn_qkv.weight", f32(tiled(t[la + "in_proj_qkv.weight"], nk, per_k, dv, key_rows)))
            w.add_tensor(b + "attn_gate.weight", f32(tiled(t[la + "in_proj_z.weight"], nk, per_k, dv)))
            w.add_tensor(b + "ssm_beta.weight", f32(tiled(t[la + "in_proj_b.weight"], nk, per_k, 1)))
            w.add_tensor(b + "ssm_alpha.weight", f32(tiled(t[la + "in_proj_a.weight"], nk, per_k, 1)))
            conv = t[la + "conv1d.weight"][:, 0, :]
            w.add_tensor(b + "ssm_conv1d.weight", f32(tiled(conv, nk, per_k, dv, key_rows)))
            w.add_tensor(b + "ssm_a", f32(tiled(-np.exp(t[la + "A_log"].astype(np.float64)), nk, per_k, 1)))
            w.add_tensor(b + "ssm_dt.bias", f32(tiled(t[la + "dt_bias"], nk, per_k, 1)))
            w.add_tensor(b + "ssm_norm.weight", f32(t[la + "norm.weight"]))
            w.add_tensor(b + "ssm_out.weight", f32(tiled(t[la + "out_proj.weight"].T, nk, per_k, dv).T))
        if moe:
            add_experts(w, t, c, layer)
        else:
            for hf, ll in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                w.add_tensor(b + ll + ".weight", f32(t[p + "mlp." + hf + ".weight"]))
    if mtp:
        add_mtp_block(w, mtp, c, moe)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_with_transformers(src, path, **settings):
    """transformers reads the file back (its GGUF integration) and must give the golden logits
    of the model in `src` (settings: what from_pretrained is told beside the file)."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32, **settings)
    model.eval()
    with open(os.path.join(src, "golden.json")) as f:
        golden = json.load(f)
    worst = 0.0
    for i, seq in enumerate(golden["sequences"]):
        want = np.fromfile(os.path.join(src, f"logits_{i}.f32"), dtype=np.float32).reshape(len(seq), -1)
        with torch.no_grad():
            got = model(torch.tensor([seq])).logits[0].numpy()
        worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    assert worst < 1e-4, f"{path}: transformers reads logits {worst:.2e} away from the golden ones"
    print(f"{path}: transformers' GGUF reader gives the golden logits (max relative error {worst:.2e})")


def main():
    """Writes (or refreshes) the files as the tests do, then checks each with transformers."""
    import golden_gguf
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(golden_gguf.PLAIN))
    args = ap.parse_args()
    names = ["qwen3_5.gguf", "qwen3_5_moe.gguf", "qwen3_5_moe_mtp.gguf"]
    golden_gguf.materialize(args.out, names)
    for name in names:
        check_with_transformers(str(golden_gguf.MODELS / name[:-len(".gguf")]), os.path.join(args.out, name))


if __name__ == "__main__":
    main()
