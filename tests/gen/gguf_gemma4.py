#!/usr/bin/env python3
"""Writes the tiny Gemma 4 models (tests/golden/models/gemma4 and gemma4_moe, BF16) as
llama.cpp's converter writes `gemma4` GGUF files (its conversion/gemma.py, Gemma4Model):

- the keys of its Gemma 3 converter, then: attention.sliding_window_pattern (one flag a
  layer, true = sliding), attention.key_length / value_length the full layers' head width
  (global_head_dim) and key_length_swa / value_length_swa the sliding layers', head_count_kv
  one value a layer when the config has num_global_key_value_heads, rope.dimension_count the
  full width and rope.dimension_count_swa the sliding one, rope.freq_base (full layers) and
  rope.freq_base_swa, attention.shared_kv_layers and embedding_length_per_layer_input (0 for
  these shapes), expert_feed_forward_length;
- the norms as stored (Gemma 4's RMSNorm multiplies by w, not 1 + w), in F32;
- the full layers' proportional RoPE as a rope_freqs tensor of per-pair divisors, 1 for the
  pairs that turn and 1e30 for the others;
- layer_scalar as blk.N.layer_output_scale.weight; the router's projection as ffn_gate_inp,
  its scale as ffn_gate_inp.scale and its per-expert scale as ffn_down_exps.scale; the
  experts stacked as the checkpoint has them (ffn_gate_up_exps [E, 2I, H], ffn_down_exps);
  pre_feedforward_layernorm_2 / post_feedforward_layernorm_1 / _2 as pre_ffw_norm_2,
  post_ffw_norm_1, post_ffw_norm_2; no attn_v on the full layers of a K = V model.

The oracle is not this script: sparkd must read the file to transformers' golden logits of
the safetensors model (tests/unit/test_cpu_forward.cpp). tests/gen/golden_gguf.py calls
write() at test time (numpy, safetensors and gguf only).
"""
import json
import os

import gguf
import numpy as np

from gguf_gemma3 import add_vocabulary
from gguf_pooling import read_safetensors

HF_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight", "layer_scalar": "layer_output_scale.weight",
    "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale", "experts.gate_up_proj": "ffn_gate_up_exps.weight",
    "experts.down_proj": "ffn_down_exps.weight", "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
}


def write(src, path, broken=None):
    """`broken` (tests of hostile files): key -> a value written in place of the right one,
    for "pattern" (the layer flags), "kv_heads" (head_count_kv) and "rope_freqs"."""
    broken = broken or {}
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    t = read_safetensors(os.path.join(src, "model.safetensors"))
    rope = c["rope_parameters"]
    sliding = [lt == "sliding_attention" for lt in c["layer_types"]]
    w = gguf.GGUFWriter(path, "gemma4")
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_final_logit_softcapping(c["final_logit_softcapping"])
    w.add_sliding_window(c["sliding_window"])
    w.add_shared_kv_layers(c["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(c["hidden_size_per_layer_input"] or 0)
    w.add_sliding_window_pattern(broken.get("pattern", sliding))
    w.add_key_length(c["global_head_dim"])
    w.add_value_length(c["global_head_dim"])
    w.add_key_length_swa(c["head_dim"])
    w.add_value_length_swa(c["head_dim"])
    if "kv_heads" in broken:
        w.add_head_count_kv(broken["kv_heads"])
    elif c.get("num_global_key_value_heads") is not None:
        w.add_head_count_kv([c["num_key_value_heads"] if s else c["num_global_key_value_heads"] for s in sliding])
    else:
        w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_dimension_count(c["global_head_dim"])
    w.add_rope_dimension_count_swa(c["head_dim"])
    if c.get("enable_moe_block"):
        w.add_expert_count(c["num_experts"])
        w.add_expert_used_count(c["top_k_experts"])
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    add_vocabulary(w, c)

    def tensor(name, a):
        a = np.ascontiguousarray(a)
        if a.ndim >= 2 and not name.endswith("norm.weight"):  # BF16 as the checkpoint has it
            w.add_tensor(name, (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, a.astype(np.float32))

    tensor("token_embd.weight", t["model.embed_tokens.weight"])
    tensor("output_norm.weight", t["model.norm.weight"])
    half = c["global_head_dim"] // 2
    turning = int(rope["full_attention"]["partial_rotary_factor"] * c["global_head_dim"] / 2)
    freqs = broken.get("rope_freqs", [1.0] * turning + [1e30] * (half - turning))
    tensor("rope_freqs.weight", np.array(freqs, dtype=np.float32))
    for layer in range(c["num_hidden_layers"]):
        for hf, ll in HF_TO_GGUF.items():
            name = f"model.layers.{layer}.{hf}"
            if name in t:
                tensor(f"blk.{layer}.{ll}", t[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
