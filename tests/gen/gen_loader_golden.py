#!/usr/bin/env python3
# gen_loader_golden.py — writes small safetensors / GGUF files and the values the
# reference readers (Python `safetensors`, `gguf`) get from them, for the loader tests.
#
# usage: gen_loader_golden.py [OUT_DIR]   (default: tests/golden/loader)
#
# Every expected value in golden.json comes from the reference packages reading the
# files back (safetensors.deserialize / safe_open, gguf.GGUFReader, gguf.quants.dequantize)
# or from the Hugging Face config objects of `transformers`; none from sparkd.
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V
from safetensors import TensorSpec, deserialize, safe_open, serialize_file

SEED = 1234


def fnv64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def fnv64_np(a: np.ndarray) -> str:
    # Vectorised FNV-1a is awkward; the tensors here are small enough for the plain loop
    # over bytes when done in chunks through Python ints.
    return fnv64(np.ascontiguousarray(a).tobytes())


# ---------------------------------------------------------------------------------
# safetensors: one file with every dtype, a scalar, an empty tensor and metadata.
def gen_safetensors(out, rng):
    tensors = {}
    keep = []  # the buffers TensorSpec points into must outlive serialize_file
    torch_names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                   "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                   "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}

    def add(name, dtype, shape, raw):
        buf = np.frombuffer(raw, dtype=np.uint8).copy() if raw else np.zeros(1, np.uint8)
        keep.append(buf)
        tensors[name] = TensorSpec(dtype=torch_names[dtype], shape=list(shape),
                                   data_ptr=buf.ctypes.data, data_len=len(raw))
        raws[name] = raw

    raws = {}

    add("f64", "F64", [3, 2], rng.standard_normal((3, 2)).astype("<f8").tobytes())
    add("f32", "F32", [4, 5], rng.standard_normal((4, 5)).astype("<f4").tobytes())
    add("f16", "F16", [2, 8], rng.standard_normal((2, 8)).astype("<f2").tobytes())
    add("bf16", "BF16", [3, 4], rng.integers(0, 2**16, 12, dtype=np.uint16).astype("<u2").tobytes())
    add("i64", "I64", [5], rng.integers(-2**62, 2**62, 5, dtype=np.int64).astype("<i8").tobytes())
    add("i32", "I32", [2, 2], rng.integers(-2**31, 2**31, 4, dtype=np.int64).astype("<i4").tobytes())
    add("i16", "I16", [3], rng.integers(-2**15, 2**15, 3).astype("<i2").tobytes())
    add("i8", "I8", [7], rng.integers(-128, 128, 7).astype("i1").tobytes())
    add("u8", "U8", [2, 3], rng.integers(0, 256, 6).astype("u1").tobytes())
    add("bool", "BOOL", [4], bytes([1, 0, 0, 1]))
    add("f8_e4m3", "F8_E4M3", [6], rng.integers(0, 256, 6).astype("u1").tobytes())
    add("f8_e5m2", "F8_E5M2", [6], rng.integers(0, 256, 6).astype("u1").tobytes())
    add("scalar", "F32", [], struct.pack("<f", 3.25))
    add("empty", "F32", [0, 4], b"")
    path = os.path.join(out, "mixed.safetensors")
    serialize_file(tensors, path, metadata={"format": "pt", "note": "golden"})

    # Read back with the reference reader: names, dtypes, shapes and bytes.
    with open(path, "rb") as f:
        back = deserialize(f.read())
    ref = []
    for name, t in sorted(back, key=lambda x: x[0]):
        ref.append({"name": name, "dtype": t["dtype"], "shape": list(t["shape"]), "hex": bytes(t["data"]).hex()})
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        # numpy view of a float tensor, as a second opinion on the byte order.
        assert np.array_equal(f.get_tensor("f32"), np.frombuffer(raws["f32"], "<f4").reshape(4, 5))
    return {"file": "mixed.safetensors", "metadata": meta, "tensors": ref}


# ---------------------------------------------------------------------------------
# GGUF quantization types: rows of every supported type and the reference dequantization.
def k_quant_blocks(rng, qtype, n_blocks):
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    # Sane f16 scales (no inf/NaN): d and dmin in [2^-10, 2^-4) with random signs for d.
    def f16(vals):
        return np.asarray(vals, dtype="<f2").view(np.uint8).reshape(n_blocks, 2)
    if qtype in (Q.Q4_K, Q.Q5_K):
        raw[:, 0:2] = f16(rng.uniform(2**-10, 2**-4, n_blocks) * rng.choice([-1, 1], n_blocks))
        raw[:, 2:4] = f16(rng.uniform(2**-10, 2**-4, n_blocks))
    elif qtype == Q.Q6_K:
        raw[:, type_size - 2:] = f16(rng.uniform(2**-10, 2**-4, n_blocks) * rng.choice([-1, 1], n_blocks))
    return raw


def gen_quant(out, rng):
    path = os.path.join(out, "quant.gguf")
    w = gguf.GGUFWriter(path, "llama")
    rows = 3
    originals = {}
    # Plain and legacy-quantized types come from real values through gguf's quantizer.
    for name, qtype, cols in [("t_f32", Q.F32, 64), ("t_f16", Q.F16, 64), ("t_bf16", Q.BF16, 64),
                              ("t_q8_0", Q.Q8_0, 96), ("t_q4_0", Q.Q4_0, 96), ("t_q4_1", Q.Q4_1, 96)]:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        x[0, :4] = [0.0, -0.0, 1e-8, 65000.0] if qtype in (Q.F32, Q.F16, Q.BF16) else x[0, :4]
        if qtype == Q.F32:
            w.add_tensor(name, x)
        elif qtype == Q.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        originals[name] = qtype
    # MXFP4 from gguf's quantizer, its source values kept so that sparkd's quantizer (dummy
    # weights) can be held to the same bytes; its own generator leaves the others' draws alone.
    mxfp4_source = np.random.default_rng(39).standard_normal((rows, 96)).astype(np.float32)
    mxfp4_source[1, 32:64] = 0.0  # an all-zero block
    mxfp4_source[2, 64:96] *= 1e-3
    q = gguf.quants.quantize(mxfp4_source, Q.MXFP4)
    w.add_tensor("t_mxfp4", q, raw_shape=q.shape, raw_dtype=Q.MXFP4)
    # Q5_0 and Q5_1 (what llama-quantize stores for Q4_K and Q5_K rows that are not whole
    # 256-value blocks) from gguf's quantizer, also with a generator of their own.
    legacy5 = np.random.default_rng(50).standard_normal((rows, 96)).astype(np.float32)
    legacy5[1, 32:64] *= 1e-3
    for name, qtype in [("t_q5_0", Q.Q5_0), ("t_q5_1", Q.Q5_1)]:
        q = gguf.quants.quantize(legacy5, qtype)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    # K-quants: random bytes with sane scales (gguf-py has no K-quant quantizer).
    for name, qtype in [("t_q4_k", Q.Q4_K), ("t_q5_k", Q.Q5_K), ("t_q6_k", Q.Q6_K)]:
        blocks = k_quant_blocks(rng, qtype, rows * 2)  # 3 rows of 512 elements
        raw = blocks.reshape(rows, -1)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
    # A 3-D and a 1-D tensor, to check dimension order.
    w.add_tensor("t_3d", rng.standard_normal((2, 3, 32)).astype(np.float32))
    w.add_tensor("t_1d", rng.standard_normal(5).astype(np.float32))

    # Metadata of every value type, arrays of several element types, nested arrays.
    w.add_uint8("m.u8", 250)
    w.add_int8("m.i8", -100)
    w.add_uint16("m.u16", 65000)
    w.add_int16("m.i16", -32000)
    w.add_uint32("m.u32", 4000000000)
    w.add_int32("m.i32", -2000000000)
    w.add_float32("m.f32", 0.1)
    w.add_bool("m.bool", True)
    w.add_string("m.str", "héllo \u2603 \x00 end")
    w.add_uint64("m.u64", 2**63 + 5)
    w.add_int64("m.i64", -2**62)
    w.add_float64("m.f64", 2.0 / 3.0)
    w.add_key_value("m.arr_u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("m.arr_i16", [-5, 7], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("m.arr_u64", [2**64 - 1, 0], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("m.arr_f64", [1.5, -2.25], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("m.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_array("m.arr_str", ["a", "", "ü"])
    w.add_array("m.arr_f32", [0.5, 0.1])
    w.add_array("m.arr_nested", [[1, 2], [3]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(path)
    tensors = []
    for t in r.tensors:
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4")
        tensors.append({"name": t.name, "type": t.tensor_type.name,
                        "shape": [int(x) for x in reversed(t.shape)],  # outermost first
                        "f32_hex": deq.tobytes().hex()})
    metadata = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        metadata[k] = {"types": [int(x) for x in f.types], "value": jsonable(f.contents())}
    return {"file": "quant.gguf", "version": 3, "alignment": 32, "data_start": int(r.data_offset),
            "tensors": tensors, "metadata": metadata,
            "mxfp4_source": {"name": "t_mxfp4", "f32_hex": mxfp4_source.astype("<f4").tobytes().hex()}}


def jsonable(v):
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return v


# ---------------------------------------------------------------------------------
# Tiny models: the same random weights as a Hugging Face folder and as a GGUF file.
def llama_permute(weights, n_head, n_head_kv):
    # Verbatim from llama.cpp convert_hf_to_gguf.py, LlamaModel.permute.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def rope_hf(x, pos, theta):
    # transformers' rotate_half convention: pairs (i, i + d/2).
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.concatenate([pos * inv, pos * inv])
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * np.cos(ang) + rot * np.sin(ang)


def rope_interleaved(x, pos, theta):
    # ggml's normal (non-NeoX) RoPE used for llama: pairs (2i, 2i + 1).
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out


def check_rope_equivalence(rng):
    """llama.cpp's permuted Q/K with interleaved RoPE == HF Q/K with rotate_half RoPE,
    once the interleaved rows are put back (row 2i -> i, row 2i+1 -> i + d/2)."""
    n_head, d, hidden = 3, 8, 12
    wq = rng.standard_normal((n_head * d, hidden))
    x = rng.standard_normal(hidden)
    p = llama_permute(wq, n_head, n_head)
    for pos in (0, 1, 7, 123):
        hf = rope_hf((wq @ x).reshape(n_head, d), pos, 10000.0)
        gg = rope_interleaved((p @ x).reshape(n_head, d), pos, 10000.0)
        back = np.concatenate([gg[:, 0::2], gg[:, 1::2]], axis=-1)
        assert np.allclose(hf, back, atol=1e-12), "rope layouts disagree"
    # Scores q.k are invariant under the same row order for q and k.
    return True


def make_config(arch):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    if arch == "llama":
        c = LlamaConfig(**dict(common, max_position_embeddings=16384), rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 8192})
        name = "LlamaForCausalLM"
    elif arch == "qwen2":
        c = Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        name = "Qwen2ForCausalLM"
    elif arch == "qwen3":
        c = Qwen3Config(**dict(common, tie_word_embeddings=True), head_dim=32,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        name = "Qwen3ForCausalLM"
    else:
        c = Qwen3MoeConfig(**common, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                           norm_topk_prob=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        name = "Qwen3MoeForCausalLM"
    d = c.to_dict()
    d["architectures"] = [name]
    d["torch_dtype"] = "float16"
    return c, d


def model_tensors(c, arch, rng):
    h, L = c.hidden_size, c.num_hidden_layers
    hd = getattr(c, "head_dim", None) or h // c.num_attention_heads
    nq, nkv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    t = {}

    def w(name, *shape, scale=0.1):
        t[name] = (rng.standard_normal(shape) * scale).astype(np.float16)

    w("model.embed_tokens.weight", c.vocab_size, h)
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        w(p + "self_attn.q_proj.weight", nq, h)
        w(p + "self_attn.k_proj.weight", nkv, h)
        w(p + "self_attn.v_proj.weight", nkv, h)
        w(p + "self_attn.o_proj.weight", h, nq)
        if arch == "qwen2":
            w(p + "self_attn.q_proj.bias", nq)
            w(p + "self_attn.k_proj.bias", nkv)
            w(p + "self_attn.v_proj.bias", nkv)
        if arch in ("qwen3", "qwen3moe"):
            t[p + "self_attn.q_norm.weight"] = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
            t[p + "self_attn.k_norm.weight"] = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
        if arch == "qwen3moe":
            w(p + "mlp.gate.weight", c.num_experts, h)
            for e in range(c.num_experts):
                w(p + f"mlp.experts.{e}.gate_proj.weight", c.moe_intermediate_size, h)
                w(p + f"mlp.experts.{e}.up_proj.weight", c.moe_intermediate_size, h)
                w(p + f"mlp.experts.{e}.down_proj.weight", h, c.moe_intermediate_size)
        else:
            w(p + "mlp.gate_proj.weight", c.intermediate_size, h)
            w(p + "mlp.up_proj.weight", c.intermediate_size, h)
            w(p + "mlp.down_proj.weight", h, c.intermediate_size)
    t["model.norm.weight"] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    if not c.tie_word_embeddings:
        w("lm_head.weight", c.vocab_size, h)
    return t, hd


GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp"}


def write_gguf_model(path, arch, c, hd, tensors, qtype=None, quantize=None, file_type=None):
    """As llama.cpp's converter would: metadata keys, tensor names, Q/K permutation for
    llama, experts stacked into one tensor per projection. With `qtype` (a
    GGMLQuantizationType, or a function of the GGUF tensor name giving one or None), every
    matrix (2-D, or 3-D stacked experts) whose rows are whole blocks is quantized by
    `quantize` (default: gguf's own quantizer), as llama-quantize would store it;
    `file_type` is general.file_type then."""
    wr = gguf.GGUFWriter(path, arch)
    add_tensor = wr.add_tensor

    def add_matrix(name, a):
        qt = qtype(name) if callable(qtype) else qtype
        if qt is None or a.ndim not in (2, 3) or a.shape[-1] % gguf.GGML_QUANT_SIZES[qt][0]:
            return add_tensor(name, a)
        q = (quantize or gguf.quants.quantize)(np.ascontiguousarray(a, dtype=np.float32), qt)
        add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
    wr.add_tensor = add_matrix
    wr.add_block_count(c.num_hidden_layers)
    wr.add_context_length(c.max_position_embeddings)
    wr.add_embedding_length(c.hidden_size)
    wr.add_feed_forward_length(c.intermediate_size)
    wr.add_head_count(c.num_attention_heads)
    wr.add_head_count_kv(c.num_key_value_heads)
    wr.add_rope_freq_base(c.rope_parameters["rope_theta"])
    wr.add_layer_norm_rms_eps(c.rms_norm_eps)
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_rope_dimension_count(hd)
    wr.add_file_type(file_type if file_type is not None else {None: 1, Q.Q8_0: 7}[qtype])  # MOSTLY_F16, MOSTLY_Q8_0
    if arch == "qwen3moe":
        wr.add_expert_count(c.num_experts)
        wr.add_expert_used_count(c.num_experts_per_tok)
        wr.add_expert_feed_forward_length(c.moe_intermediate_size)
    # A tokenizer: byte-ish tokens, merges, every special id and flag.
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(c.vocab_size - 4)] + ["\u0120\u00e9\u2603"]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("smollm")
    wr.add_token_list(tokens)
    wr.add_token_scores([float(-i) / 4 for i in range(len(tokens))])
    wr.add_token_types([3, 3, 3] + [1] * (len(tokens) - 4) + [4])
    wr.add_token_merges(["t 1", "t1 0", "\u0120 \u00e9"])
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_unk_token_id(0)
    wr.add_pad_token_id(2)
    wr.add_add_bos_token(True)
    wr.add_add_eos_token(False)
    wr.add_add_space_prefix(False)
    wr.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    if arch == "llama":
        # llama.cpp stores Llama 3 rope scaling as per-frequency divisors.
        rp = c.rope_parameters
        base, factor = rp["rope_theta"], rp["factor"]
        low_wl = rp["original_max_position_embeddings"] / rp["low_freq_factor"]
        high_wl = rp["original_max_position_embeddings"] / rp["high_freq_factor"]
        freqs = 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
        div = []
        for fr in freqs:
            wl = 2 * np.pi / fr
            if wl < high_wl:
                div.append(1.0)
            elif wl > low_wl:
                div.append(factor)
            else:
                sm = (rp["original_max_position_embeddings"] / wl - rp["low_freq_factor"]) / (
                    rp["high_freq_factor"] - rp["low_freq_factor"])
                div.append(1 / ((1 - sm) / factor + sm))
        wr.add_tensor("rope_freqs.weight", np.array(div, dtype=np.float32))

    for name, a in tensors.items():
        if name == "model.embed_tokens.weight":
            wr.add_tensor("token_embd.weight", a)
            continue
        if name == "model.norm.weight":
            wr.add_tensor("output_norm.weight", a)
            continue
        if name == "lm_head.weight":
            wr.add_tensor("output.weight", a)
            continue
        parts = name.split(".")
        layer, rest, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
        if ".experts." in name:
            if not name.endswith(".0." + parts[-2] + "." + kind) or parts[5] != "0":
                continue  # stacked once, from expert 0
            proj = parts[6]
            stacked = np.stack([tensors[f"model.layers.{layer}.mlp.experts.{e}.{proj}.{kind}"]
                                for e in range(c.num_experts)])
            gname = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
            wr.add_tensor(f"blk.{layer}.{gname}.{kind}", stacked)
            continue
        if arch == "llama" and rest == "self_attn.q_proj":
            a = llama_permute(a, c.num_attention_heads, c.num_attention_heads)
        if arch == "llama" and rest == "self_attn.k_proj":
            a = llama_permute(a, c.num_attention_heads, c.num_key_value_heads)
        wr.add_tensor(f"blk.{layer}.{GGUF_NAMES[rest]}.{kind}", np.ascontiguousarray(a))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def write_hf_folder(folder, cfg_dict, tensors, shards):
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 3]}, f)
    names = sorted(tensors)
    if shards == 1:
        save_file({n: tensors[n] for n in names}, os.path.join(folder, "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(folder, fn))
        weight_map.update({n: fn for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}, f)


def gen_model(out, arch, rng, shards):
    c, cfg = make_config(arch)
    tensors, hd = model_tensors(c, arch, rng)
    folder = os.path.join(out, f"{arch}_hf")
    write_hf_folder(folder, cfg, tensors, shards)
    gpath = os.path.join(out, f"{arch}.gguf")
    write_gguf_model(gpath, arch, c, hd, tensors)

    # The reference readers' view of both files.
    hf = {}
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    for fn in files:
        with safe_open(os.path.join(folder, fn), framework="numpy") as f:
            for n in f.keys():
                a = f.get_tensor(n)
                hf[n] = {"dtype": str(a.dtype), "shape": list(a.shape), "fnv64": fnv64_np(a)}
    r = gguf.GGUFReader(gpath)
    gg = {}
    for t in r.tensors:
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4")
        gg[t.name] = {"type": t.tensor_type.name, "shape": [int(x) for x in reversed(t.shape)],
                      "f32_fnv64": fnv64_np(deq)}
    rp = c.rope_parameters
    spec = {
        "architecture": cfg["architectures"][0], "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_layers": c.num_hidden_layers,
        "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads, "head_dim": hd,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": rp["rope_theta"],
        "rope_type": rp.get("rope_type", "default"), "rope_factor": rp.get("factor", 1.0),
        "max_position_embeddings": c.max_position_embeddings, "tie_word_embeddings": c.tie_word_embeddings,
        "num_experts": getattr(c, "num_experts", 0) or 0, "num_experts_per_tok": getattr(c, "num_experts_per_tok", 0) or 0,
        "moe_intermediate_size": getattr(c, "moe_intermediate_size", 0) or 0,
        "norm_topk_prob": bool(getattr(c, "norm_topk_prob", False)),
    }
    vocab = {
        "tokens_fnv64": fnv64("\n".join(r.fields["tokenizer.ggml.tokens"].contents()).encode()),
        "n_tokens": len(r.fields["tokenizer.ggml.tokens"].data),
        "last_token": r.fields["tokenizer.ggml.tokens"].contents()[-1],
        "scores": [float(x) for x in r.fields["tokenizer.ggml.scores"].contents()[:5]],
        "token_types": [int(x) for x in r.fields["tokenizer.ggml.token_type"].contents()],
        "merges": r.fields["tokenizer.ggml.merges"].contents(),
        "bos": int(r.fields["tokenizer.ggml.bos_token_id"].contents()),
        "eos": int(r.fields["tokenizer.ggml.eos_token_id"].contents()),
        "unk": int(r.fields["tokenizer.ggml.unknown_token_id"].contents()),
        "pad": int(r.fields["tokenizer.ggml.padding_token_id"].contents()),
        "add_bos": bool(r.fields["tokenizer.ggml.add_bos_token"].contents()),
        "add_eos": bool(r.fields["tokenizer.ggml.add_eos_token"].contents()),
        "add_space_prefix": bool(r.fields["tokenizer.ggml.add_space_prefix"].contents()),
        "model": r.fields["tokenizer.ggml.model"].contents(),
        "pre": r.fields["tokenizer.ggml.pre"].contents(),
        "chat_template": r.fields["tokenizer.chat_template"].contents(),
    }
    return {"arch": arch, "hf_folder": f"{arch}_hf", "gguf": f"{arch}.gguf", "spec": spec,
            "hf_tensors": hf, "gguf_tensors": gg, "vocab": vocab}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "golden", "loader")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    golden = {"generator": "tests/gen/gen_loader_golden.py", "gguf_version": gguf.__name__,
              "rope_equivalence": check_rope_equivalence(rng),
              "safetensors": gen_safetensors(out, rng), "quant": gen_quant(out, rng),
              "models": [gen_model(out, "llama", rng, 1), gen_model(out, "qwen2", rng, 1),
                         gen_model(out, "qwen3", rng, 2), gen_model(out, "qwen3moe", rng, 3)]}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
