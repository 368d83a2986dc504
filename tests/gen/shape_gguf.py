"""GGUF files that have a real model's metadata and tensor table but no weights: the data
section is a hole (a sparse file), so a 70B Q4_K_M "file" takes no disk and is written in a
second. Good for what reads only the header: `sparkd check --device` plans. Written with the
`gguf` package's writer, so the layout is the reference's, not sparkd's.

Shapes follow the published configs; the Q4_K_M mix follows llama.cpp's rule for that
type: Q6_K for output.weight and for attn_v / ffn_down (ffn_down_exps) of the first and
last eighth of the layers and every third layer between, Q4_K for the other matrices, F32
norms and biases."""
import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# (arch, layers, hidden, ffn, heads, kv heads, head dim, vocab, experts, experts used,
#  expert ffn, q/k norms, qkv bias, tied embeddings)
SHAPES = {
    "llama-3.1-8b": ("llama", 32, 4096, 14336, 32, 8, 128, 128256, 0, 0, 0, False, False, False),
    "qwen2.5-32b": ("qwen2", 64, 5120, 27648, 40, 8, 128, 152064, 0, 0, 0, False, True, False),
    "llama-3.3-70b": ("llama", 80, 8192, 28672, 64, 8, 128, 128256, 0, 0, 0, False, False, False),
    "qwen3-30b-a3b": ("qwen3moe", 48, 2048, 6144, 32, 4, 128, 151936, 128, 8, 768, True, False, False),
}


def q4_k_m(name, layer, layers):
    if name == "output.weight":
        return Q.Q6_K
    if name.split(".")[-2] in ("attn_v", "ffn_down", "ffn_down_exps"):
        eighth = layers // 8
        if layer < eighth or layer >= layers - eighth or (layer - eighth) % 3 == 2:
            return Q.Q6_K
    return Q.Q4_K


def tensors(shape):
    """(gguf name, numpy-order shape, layer or None) of every tensor of the model."""
    arch, n, h, ff, heads, kv, hd, vocab, ne, _, eff, qk_norm, qkv_bias, tied = shape
    out = [("token_embd.weight", (vocab, h), None), ("output_norm.weight", (h,), None)]
    if not tied:
        out.append(("output.weight", (vocab, h), None))
    for i in range(n):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), i), (b + "attn_q.weight", (heads * hd, h), i),
                (b + "attn_k.weight", (kv * hd, h), i), (b + "attn_v.weight", (kv * hd, h), i),
                (b + "attn_output.weight", (h, heads * hd), i), (b + "ffn_norm.weight", (h,), i)]
        if qkv_bias:
            out += [(b + "attn_q.bias", (heads * hd,), i), (b + "attn_k.bias", (kv * hd,), i),
                    (b + "attn_v.bias", (kv * hd,), i)]
        if qk_norm:
            out += [(b + "attn_q_norm.weight", (hd,), i), (b + "attn_k_norm.weight", (hd,), i)]
        if ne:
            out += [(b + "ffn_gate_inp.weight", (ne, h), i), (b + "ffn_gate_exps.weight", (ne, eff, h), i),
                    (b + "ffn_up_exps.weight", (ne, eff, h), i), (b + "ffn_down_exps.weight", (ne, h, eff), i)]
        else:
            out += [(b + "ffn_gate.weight", (ff, h), i), (b + "ffn_up.weight", (ff, h), i),
                    (b + "ffn_down.weight", (h, ff), i)]
    return out


def stored_type(name, dims, layer, layers, qtype):
    if len(dims) == 1 or name.endswith("ffn_gate_inp.weight"):
        return Q.F32  # norms, biases and the router stay f32, as llama-quantize leaves them
    if qtype == "Q4_K_M":
        return q4_k_m(name, layer, layers)
    return {"Q8_0": Q.Q8_0, "F16": Q.F16}[qtype]


def write(path, model, qtype):
    """Writes `model` (a SHAPES key) stored as `qtype` ("Q4_K_M", "Q8_0" or "F16") to path;
    returns the bytes of its tensors (the weights a full file would hold)."""
    shape = SHAPES[model]
    arch, n, h, ff, heads, kv, hd, vocab, ne, used, eff = shape[:11]
    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_block_count(n)
    wr.add_context_length(131072 if arch == "llama" else 32768)
    wr.add_embedding_length(h)
    wr.add_feed_forward_length(ff)
    wr.add_head_count(heads)
    wr.add_head_count_kv(kv)
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_rope_dimension_count(hd)
    wr.add_rope_freq_base(500000.0 if arch == "llama" else 1000000.0)
    wr.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
    wr.add_file_type({"Q4_K_M": 15, "Q8_0": 7, "F16": 1}[qtype])
    if ne:
        wr.add_expert_count(ne)
        wr.add_expert_used_count(used)
        wr.add_expert_feed_forward_length(eff)
    tokens = ["<s>", "</s>"] + [f"t{i}" for i in range(vocab - 2)]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_types([3, 3] + [1] * (vocab - 2))
    wr.add_token_merges(["t 1"])
    wr.add_bos_token_id(0)
    wr.add_eos_token_id(1)
    wr.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    sizes = []
    for name, dims, layer in tensors(shape):
        t = stored_type(name, dims, layer, n, qtype)
        block, type_bytes = gguf.GGML_QUANT_SIZES[t]
        nbytes = int(np.prod(dims)) // block * type_bytes
        wr.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=t)
        sizes.append(nbytes)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    wr.close()
    # The data section starts at the next alignment boundary; each tensor is padded to it.
    align = 32
    data_start = (path.stat().st_size + align - 1) // align * align
    end = data_start + sum((b + align - 1) // align * align for b in sizes)
    with open(path, "r+b") as f:
        f.truncate(end)  # a hole: no disk blocks
    return sum(sizes)
