"""ModelOpt NVFP4 checkpoints that have a real model's config and tensor table but no weights:
each safetensors shard's data region is a hole (a sparse file), so an 8B or 30B "checkpoint"
takes no disk and is written in a second. Good for what reads only headers and configs
(`sparkd check --device` plans), as tests/gen/shape_gguf.py is for GGUF files.

The tensor table is ModelOpt's export of quant_algo NVFP4 (as in NVIDIA's published *-FP4 /
*-NVFP4 checkpoints): each quantized linear X has X.weight U8 [out, in/2] (two E2M1 codes a
byte), X.weight_scale F8_E4M3 [out, in/16], X.weight_scale_2 F32 [] and X.input_scale F32 [];
embeddings, norms, the LM head and MoE routers stay BF16. The configs are the published ones
(tests/golden/configs) with quantization_config added, and hf_quant_config.json beside them.
No KV-cache quantization (kv_cache_quant_algo null), unless kv_fp8: then kv_cache_quant_algo
FP8 and each attention layer's k_proj.k_scale and v_proj.v_scale (F32 []), as ModelOpt
exports a checkpoint calibrated for an FP8 KV cache.

  llama-3.1-8b-nvfp4    Llama-3.1-8B, every linear of the layers NVFP4, lm_head excluded.
  qwen3-30b-a3b-nvfp4   Qwen3-30B-A3B, experts and attention NVFP4; routers and lm_head BF16.
  qwen3.6-35b-a3b-nvfp4 Qwen3.6-35B-A3B (Qwen3_5MoeForConditionalGeneration: Gated DeltaNet
                        and gated attention layers, 256 experts and a shared expert), the
                        text model under model.language_model. with each expert's matrices
                        apart (as NVIDIA's export names them): experts, shared expert,
                        attention and the DeltaNet's qkv, z and out projections NVFP4; its
                        32-row a/b projections, conv1d, routers, the shared expert's gate and
                        lm_head BF16. (The vision tower and MTP head are not written.)

usage: write_shape(name, out_dir, kv_fp8=False) -> bytes of the tensors (what full shards would hold)
"""
import json
import os
import struct

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "configs")
SHAPES = {"llama-3.1-8b-nvfp4": "llama3_8b", "qwen3-30b-a3b-nvfp4": "qwen3_30b_a3b",
          "qwen3.6-35b-a3b-nvfp4": "qwen3_5_35b_a3b"}
DTYPE_BYTES = {"BF16": 2, "U8": 1, "F8_E4M3": 1, "F32": 4}
SHARD_BYTES = 5 * 10 ** 9  # the exporters' default max_shard_size of 5GB
GROUP = 16


def nvfp4_linear(prefix, out, k):
    assert k % GROUP == 0, (prefix, k)
    return [(prefix + ".weight", "U8", [out, k // 2]), (prefix + ".weight_scale", "F8_E4M3", [out, k // GROUP]),
            (prefix + ".weight_scale_2", "F32", []), (prefix + ".input_scale", "F32", [])]


def tensors(c):
    """(name, dtype, shape) of every tensor of the checkpoint, in the exporter's order; and the
    modules left in BF16."""
    h, L, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    nq, nkv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    moe = "num_experts" in c
    out, excluded = [("model.embed_tokens.weight", "BF16", [vocab, h])], ["lm_head"]
    for layer in range(L):
        p = f"model.layers.{layer}."
        out += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h])]
        for proj, rows, cols in (("q_proj", nq, h), ("k_proj", nkv, h), ("v_proj", nkv, h), ("o_proj", h, nq)):
            out += nvfp4_linear(p + "self_attn." + proj, rows, cols)
        if moe:
            out += [(p + "self_attn.q_norm.weight", "BF16", [hd]), (p + "self_attn.k_norm.weight", "BF16", [hd])]
        dense = not moe or layer in c.get("mlp_only_layers", []) or (layer + 1) % c.get("decoder_sparse_step", 1)
        if dense:
            ff = c["intermediate_size"]
            for proj, rows, cols in (("gate_proj", ff, h), ("up_proj", ff, h), ("down_proj", h, ff)):
                out += nvfp4_linear(p + "mlp." + proj, rows, cols)
        else:
            out.append((p + "mlp.gate.weight", "BF16", [c["num_experts"], h]))
            excluded.append(p + "mlp.gate")
            eff = c["moe_intermediate_size"]
            for e in range(c["num_experts"]):
                for proj, rows, cols in (("gate_proj", eff, h), ("up_proj", eff, h), ("down_proj", h, eff)):
                    out += nvfp4_linear(f"{p}mlp.experts.{e}.{proj}", rows, cols)
    out += [("model.norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [vocab, h])]
    return out, excluded


def hybrid_tensors(top):
    """As tensors(), for a Qwen3.5 / 3.6 MoE (config with text_config)."""
    c = top["text_config"]
    h, vocab, E = c["hidden_size"], c["vocab_size"], c["num_experts"]
    hd, nq, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    kh, kd, vh, vd = (c["linear_num_key_heads"], c["linear_key_head_dim"], c["linear_num_value_heads"],
                      c["linear_value_head_dim"])
    conv, eff, shared = 2 * kh * kd + vh * vd, c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    m = "model.language_model."
    out, excluded = [(m + "embed_tokens.weight", "BF16", [vocab, h])], ["lm_head"]
    for layer, kind in enumerate(c["layer_types"]):
        p = f"{m}layers.{layer}."
        out += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h])]
        if kind == "linear_attention":
            a = p + "linear_attn."
            out += nvfp4_linear(a + "in_proj_qkv", conv, h) + nvfp4_linear(a + "in_proj_z", vh * vd, h)
            out += [(a + "in_proj_b.weight", "BF16", [vh, h]), (a + "in_proj_a.weight", "BF16", [vh, h]),
                    (a + "conv1d.weight", "BF16", [conv, 1, c["linear_conv_kernel_dim"]]),
                    (a + "A_log", "F32", [vh]), (a + "dt_bias", "BF16", [vh]), (a + "norm.weight", "F32", [vd])]
            out += nvfp4_linear(a + "out_proj", h, vh * vd)
            excluded += [a + "in_proj_b", a + "in_proj_a"]
        else:
            a = p + "self_attn."
            out += nvfp4_linear(a + "q_proj", 2 * nq * hd, h) + nvfp4_linear(a + "k_proj", nkv * hd, h)
            out += nvfp4_linear(a + "v_proj", nkv * hd, h) + nvfp4_linear(a + "o_proj", h, nq * hd)
            out += [(a + "q_norm.weight", "BF16", [hd]), (a + "k_norm.weight", "BF16", [hd])]
        out.append((p + "mlp.gate.weight", "BF16", [E, h]))
        for e in range(E):
            for proj, rows, cols in (("gate_proj", eff, h), ("up_proj", eff, h), ("down_proj", h, eff)):
                out += nvfp4_linear(f"{p}mlp.experts.{e}.{proj}", rows, cols)
        for proj, rows, cols in (("gate_proj", shared, h), ("up_proj", shared, h), ("down_proj", h, shared)):
            out += nvfp4_linear(f"{p}mlp.shared_expert.{proj}", rows, cols)
        out.append((p + "mlp.shared_expert_gate.weight", "BF16", [1, h]))
        excluded += [p + "mlp.gate", p + "mlp.shared_expert_gate"]
    out += [(m + "norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [vocab, h])]
    return out, excluded


def kv_scale(name):
    """The KV cache scale ModelOpt writes after an attention layer's k or v projection."""
    for proj in ("k", "v"):
        if name.endswith(f"self_attn.{proj}_proj.weight"):
            return [(name[:-len("weight")] + f"{proj}_scale", "F32", [])]
    return []


def nbytes(dtype, shape):
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def write_shard(path, table):
    """A safetensors file of `table` whose data region is a hole; returns its data bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in table:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)  # a hole: no disk blocks
    return offset


def write_shape(name, out_dir, kv_fp8=False):
    """Writes `name` (a SHAPES key) as a sharded ModelOpt NVFP4 folder in out_dir; returns the
    bytes of its tensors."""
    with open(os.path.join(CONFIGS, SHAPES[name], "config.json")) as f:
        cfg = json.load(f)
    table, excluded = hybrid_tensors(cfg) if "text_config" in cfg else tensors(cfg)
    if kv_fp8:
        table = [t for row in table for t in [row] + kv_scale(row[0])]
    quant = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8" if kv_fp8 else None, "group_size": GROUP, "exclude_modules": excluded}
    cfg["quantization_config"] = {"quant_method": "modelopt", **quant}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": quant}, f, indent=2)
    shards, size = [[]], 0
    for t in table:
        b = nbytes(t[1], t[2])
        if shards[-1] and size + b > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += b
    total, weight_map = 0, {}
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_shard(os.path.join(out_dir, file), shard)
        weight_map.update({t[0]: file for t in shard})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return total


if __name__ == "__main__":
    import sys
    for n in SHAPES:
        print(n, write_shape(n, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", n)))
