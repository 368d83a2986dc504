#!/usr/bin/env python3
"""Writes the tiny Nemotron-H models (tests/golden/models/nemotron_h, "M*EMM-E*-", and
nemotron_h_latent, "M*E" with Nemotron-3-Super's LatentMoE) as GGUF files the way llama.cpp's
converter writes them (convert_hf_to_gguf.py: NemotronHModel over GraniteHybridModel and
Mamba2Model; the architecture is nemotron_h_moe since both have experts), so that sparkd's
reading of that layout is held to transformers' golden logits of the safetensors models
(tests/integration/test_nemotron_h_gguf.py). The tests write the files at test time into a
temporary folder; none is committed (the tracked tree is bounded).

llama.cpp's layout, as its converter writes it and its loader (llama_model_nemotron_h) reads it:
- tensor names from gguf-py (TENSOR_NAMES): blk.N.ssm_in, ssm_conv1d, ssm_dt, ssm_a, ssm_d,
  ssm_norm, ssm_out, attn_q/k/v/output, ffn_up/ffn_down, ffn_gate_inp, exp_probs_b,
  ffn_up_exps/ffn_down_exps (experts stacked [E, rows, cols]; no gate), ffn_up_shexp /
  ffn_down_shexp, ffn_latent_down / ffn_latent_up (fc1 / fc2_latent_proj);
- every block's norm is blk.N.attn_norm, whatever the block;
- no pattern string: attention.head_count_kv is per layer (the KV heads on attention layers,
  0 elsewhere), and so is feed_forward_length (the width on feed-forward layers, 0 elsewhere);
  a layer with both 0 is Mamba-2;
- Mamba-2: ssm_a holds A = -exp(A_log) as [heads, 1], ssm_d is [heads, 1], the dt bias is
  ssm_dt.bias, conv1d squeezed to [channels, kernel], the grouped norm [groups, inner/groups];
  ssm.inner_size = heads x head_dim, ssm.time_step_rank = heads, ssm.group_count,
  ssm.state_size, ssm.conv_kernel;
- the Q and K rows of each attention head interleaved as for RoPE (GraniteHybridModel sets
  undo_permute, so LlamaModel.modify_tensors permutes q_proj and k_proj, though Nemotron-H
  has no RoPE): row 2i holds row i of the head, row 2i + 1 row i + head_dim / 2;
- experts: expert_count, expert_used_count, expert_feed_forward_length,
  expert_shared_feed_forward_length, expert_shared_count, expert_weights_norm
  (norm_topk_prob), expert_weights_scale (routed_scaling_factor), expert_group_count,
  moe_latent_size;
- context_length 2^20 (GraniteHybridModel's value for models without RoPE);
- float types as the converter picks them: with --outtype f16, 2-D ".weight" tensors in F16
  except the router, the conv1d and norms; everything else (ssm_a, ssm_d, biases, norms) F32.

One departure, for nemotron_h only: llama.cpp's converter puts the width in
feed_forward_length only on the 'E' layers of a model with experts (its loader makes every
feed-forward layer an MoE when expert_count is set), so it cannot write a pattern mixing dense
MLP ('-') and MoE ('E') layers, which this tiny model has to test every block kind at once.
Here the '-' layers carry intermediate_size too and have no router; sparkd tells the two apart
by the router (ffn_gate_inp). nemotron_h_latent ("M*E") is written exactly as llama.cpp does.

A Q8_0 copy quantizes, as llama-quantize would, every 2-D weight matrix whose rows are whole
32-value blocks (gguf.quants), the router and the conv1d excepted. write(values_only=True)
writes, for the tests, an F32 file of the values an F16 or Q8_0 copy holds (dequantized by
gguf.quants).

Needs only numpy, safetensors and gguf (the build's venv):
  python tests/gen/gen_nemotron_h_gguf.py OUT_DIR [--type f32|f16|q8_0]
"""
import argparse
import json
import os

import gguf
import numpy as np
from gguf import MODEL_TENSOR as T
from safetensors.numpy import load_file

from gen_qwen3_5_gguf import byte_char

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "models")
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
# Kept in F32 whatever the file type (the converter's and llama-quantize's exceptions).
ALWAYS_F32 = (T.FFN_GATE_INP, T.SSM_CONV1D, T.SSM_NORM)


def name(tensor, layer=None, suffix="weight"):
    base = gguf.TENSOR_NAMES[tensor].format(bid=layer)
    return f"{base}.{suffix}" if suffix else base


def interleave_heads(w, heads):
    """llama.cpp's RoPE order of q_proj / k_proj rows: per head, row 2i = row i and row
    2i + 1 = row i + head_dim / 2."""
    rows = w.shape[0]
    half = rows // heads // 2
    return w.reshape(heads, 2, half, -1).swapaxes(1, 2).reshape(rows, -1)


class Writer:
    def __init__(self, path, arch, qtype, change_tensors=None, values_only=False):
        self.w = gguf.GGUFWriter(path, arch)
        self.qtype = qtype
        self.change_tensors = change_tensors or {}
        self.values_only = values_only

    def add(self, tensor_name, a, tensor=None):
        if tensor_name in self.change_tensors:  # a test's hostile copy
            a = self.change_tensors[tensor_name](a)
            if a is None:
                return
        a = np.ascontiguousarray(a, dtype=np.float32)
        matrix = a.ndim >= 2 and tensor_name.endswith(".weight") and tensor not in ALWAYS_F32
        if self.qtype == "f16" and matrix:
            stored, kind = a.astype(np.float16), gguf.GGMLQuantizationType.F16
        elif self.qtype == "q8_0" and matrix and a.shape[-1] % 32 == 0:
            stored, kind = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
        else:
            stored, kind = a, gguf.GGMLQuantizationType.F32
        if self.values_only:  # F32 of the values the type keeps, as gguf's reference dequantizes them
            self.w.add_tensor(tensor_name, gguf.quants.dequantize(stored, kind).astype(np.float32))
        elif kind == gguf.GGMLQuantizationType.Q8_0:
            self.w.add_tensor(tensor_name, stored, raw_shape=stored.shape, raw_dtype=kind)
        else:
            self.w.add_tensor(tensor_name, stored)


def pattern_of(c):
    p = c["hybrid_override_pattern"]
    assert len(p) == c["num_hidden_layers"] and set(p) <= set("M*-E"), p
    return p


def add_keys(w, c, qtype):
    p = pattern_of(c)
    heads = c["mamba_num_heads"]
    w.add_block_count(len(p))
    w.add_context_length(2 ** 20)
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length([c["intermediate_size"] if ch == "-" else c["moe_intermediate_size"] if ch == "E" else 0
                               for ch in p])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv([c["num_key_value_heads"] if ch == "*" else 0 for ch in p])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(c["layer_norm_epsilon"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_rope_scaling_finetuned(False)
    w.add_ssm_conv_kernel(c["conv_kernel"])
    w.add_ssm_state_size(c["ssm_state_size"])
    w.add_ssm_group_count(c["n_groups"])
    w.add_ssm_inner_size(heads * c["mamba_head_dim"])
    w.add_ssm_time_step_rank(heads)
    if "E" in p:
        w.add_expert_used_count(c["num_experts_per_tok"])
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(c["moe_shared_expert_intermediate_size"])
        w.add_expert_count(c["n_routed_experts"])
        w.add_expert_shared_count(c["n_shared_experts"])
        w.add_expert_weights_norm(c["norm_topk_prob"])
        w.add_expert_weights_scale(c["routed_scaling_factor"])
        w.add_expert_group_count(c["n_group"])
        if c.get("moe_latent_size"):
            w.add_moe_latent_size(c["moe_latent_size"])
    w.add_file_type(FILE_TYPES[qtype])
    # A byte-level vocabulary of the 256 ids; the tests feed ids.
    assert c["vocab_size"] == 256
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([byte_char(b) for b in range(256)])
    w.add_token_types([3 if i in (c["bos_token_id"], c["eos_token_id"]) else 1 for i in range(256)])
    w.add_token_merges([])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])


def add_mamba(out, t, c, layer):
    m = f"backbone.layers.{layer}.mixer."
    heads, groups = c["mamba_num_heads"], c["n_groups"]
    out.add(name(T.SSM_IN, layer), t[m + "in_proj.weight"], T.SSM_IN)
    out.add(name(T.SSM_CONV1D, layer), t[m + "conv1d.weight"][:, 0, :], T.SSM_CONV1D)
    if m + "conv1d.bias" in t:
        out.add(name(T.SSM_CONV1D, layer, "bias"), t[m + "conv1d.bias"])
    out.add(name(T.SSM_DT, layer, "bias"), t[m + "dt_bias"])
    out.add(name(T.SSM_A, layer, None), -np.exp(t[m + "A_log"].astype(np.float64)).reshape(heads, 1))
    out.add(name(T.SSM_D, layer, None), t[m + "D"].reshape(heads, 1))
    out.add(name(T.SSM_NORM, layer), t[m + "norm.weight"].reshape(groups, -1), T.SSM_NORM)
    out.add(name(T.SSM_OUT, layer), t[m + "out_proj.weight"], T.SSM_OUT)


def add_attention(out, t, c, layer):
    m = f"backbone.layers.{layer}.mixer."
    out.add(name(T.ATTN_Q, layer), interleave_heads(t[m + "q_proj.weight"], c["num_attention_heads"]))
    out.add(name(T.ATTN_K, layer), interleave_heads(t[m + "k_proj.weight"], c["num_key_value_heads"]))
    out.add(name(T.ATTN_V, layer), t[m + "v_proj.weight"])
    out.add(name(T.ATTN_OUT, layer), t[m + "o_proj.weight"])


def add_moe(out, t, c, layer):
    m = f"backbone.layers.{layer}.mixer."
    out.add(name(T.FFN_GATE_INP, layer), t[m + "gate.weight"], T.FFN_GATE_INP)
    out.add(name(T.FFN_EXP_PROBS_B, layer, "bias"), t[m + "gate.e_score_correction_bias"])
    if c.get("moe_latent_size"):
        out.add(name(T.MOE_LATENT_DOWN, layer), t[m + "fc1_latent_proj.weight"])
        out.add(name(T.MOE_LATENT_UP, layer), t[m + "fc2_latent_proj.weight"])
    for hf, ll in (("up_proj", T.FFN_UP_EXP), ("down_proj", T.FFN_DOWN_EXP)):
        out.add(name(ll, layer), np.stack([t[f"{m}experts.{e}.{hf}.weight"] for e in range(c["n_routed_experts"])]))
    out.add(name(T.FFN_UP_SHEXP, layer), t[m + "shared_experts.up_proj.weight"])
    out.add(name(T.FFN_DOWN_SHEXP, layer), t[m + "shared_experts.down_proj.weight"])


def change_keys(w, changes):
    """A test's hostile copy: "<arch>." keys set to a value (a list for an array) or left out (None)."""
    for key, value in changes.items():
        key = f"{w.arch}.{key}"
        for kv in w.kv_data:
            kv.pop(key, None)
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif value is not None:
            w.add_uint32(key, value)


def write(src, path, qtype="f32", keys=None, tensors=None, values_only=False):
    """The model in folder `src` as a GGUF file at `path`; `keys` and `tensors` change it for a
    test (see change_keys; a tensor's name -> a function of its array, None to leave it out).
    With values_only, every tensor is F32 holding the values `qtype` rounds it to."""
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)  # python's json reads the bare Infinity of time_step_limit
    t = load_file(os.path.join(src, "model.safetensors"))
    out = Writer(path, "nemotron_h_moe", qtype, tensors, values_only)
    add_keys(out.w, c, "f32" if values_only else qtype)
    change_keys(out.w, keys or {})
    out.add(name(T.TOKEN_EMBD), t["backbone.embeddings.weight"])
    for layer, ch in enumerate(pattern_of(c)):
        out.add(name(T.ATTN_NORM, layer), t[f"backbone.layers.{layer}.norm.weight"])
        if ch == "M":
            add_mamba(out, t, c, layer)
        elif ch == "*":
            add_attention(out, t, c, layer)
        elif ch == "-":
            m = f"backbone.layers.{layer}.mixer."
            out.add(name(T.FFN_UP, layer), t[m + "up_proj.weight"])
            out.add(name(T.FFN_DOWN, layer), t[m + "down_proj.weight"])
        else:
            add_moe(out, t, c, layer)
    out.add(name(T.OUTPUT_NORM), t["backbone.norm_f.weight"])
    out.add(name(T.OUTPUT), t["lm_head.weight"])
    out.w.write_header_to_file()
    out.w.write_kv_data_to_file()
    out.w.write_tensors_to_file()
    out.w.close()
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="folder for nemotron_h.<type>.gguf and nemotron_h_latent.<type>.gguf")
    ap.add_argument("--type", choices=sorted(FILE_TYPES), default="f32")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for model in ("nemotron_h", "nemotron_h_latent"):
        path = write(os.path.join(MODELS, model), os.path.join(args.out, f"{model}.{args.type}.gguf"), args.type)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
