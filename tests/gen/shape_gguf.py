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


def q4_k_m(name, layer, layers, tied=False):
    if name == "output.weight" or (tied and name == "token_embd.weight"):  # the head's type
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


# Gated DeltaNet hybrids (llama.cpp's qwen35moe / qwen35): every full_attention_interval-th
# layer attends (q_proj twice as wide: query and gate), the others are DeltaNet layers; one
# multi-token-prediction block after the layers (block_count counts it).
HYBRIDS = {
    "qwen3.6-35b-a3b": dict(arch="qwen35moe", layers=40, hidden=2048, heads=16, kv=2, head_dim=256, vocab=248320,
                            experts=256, used=8, expert_ffn=512, shared_ffn=512, ffn=0, k_heads=16, v_heads=32,
                            k_dim=128, v_dim=128, conv=4, interval=4, rotary=64, mtp=1),
    "qwen3.5-27b": dict(arch="qwen35", layers=64, hidden=5120, heads=24, kv=4, head_dim=256, vocab=248320,
                        experts=0, used=0, expert_ffn=0, shared_ffn=0, ffn=17408, k_heads=16, v_heads=48,
                        k_dim=128, v_dim=128, conv=4, interval=4, rotary=64, mtp=1),
}


def hybrid_tensors(m):
    h, hd, vh, vd = m["hidden"], m["head_dim"], m["v_heads"], m["v_dim"]
    conv_dim = 2 * m["k_heads"] * m["k_dim"] + vh * vd
    out = [("token_embd.weight", (m["vocab"], h), None), ("output_norm.weight", (h,), None),
           ("output.weight", (m["vocab"], h), None)]
    for i in range(m["layers"] + m["mtp"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), i), (b + "post_attention_norm.weight", (h,), i)]
        if (i + 1) % m["interval"] == 0 or i >= m["layers"]:
            out += [(b + "attn_q.weight", (2 * m["heads"] * hd, h), i), (b + "attn_k.weight", (m["kv"] * hd, h), i),
                    (b + "attn_v.weight", (m["kv"] * hd, h), i), (b + "attn_output.weight", (h, m["heads"] * hd), i),
                    (b + "attn_q_norm.weight", (hd,), i), (b + "attn_k_norm.weight", (hd,), i)]
        else:
            out += [(b + "attn_qkv.weight", (conv_dim, h), i), (b + "attn_gate.weight", (vh * vd, h), i),
                    (b + "ssm_beta.weight", (vh, h), i), (b + "ssm_alpha.weight", (vh, h), i),
                    (b + "ssm_conv1d.weight", (conv_dim, m["conv"]), i), (b + "ssm_a", (vh,), i),
                    (b + "ssm_dt.bias", (vh,), i), (b + "ssm_norm.weight", (vd,), i),
                    (b + "ssm_out.weight", (h, vh * vd), i)]
        if m["experts"]:
            e, eff, sff = m["experts"], m["expert_ffn"], m["shared_ffn"]
            out += [(b + "ffn_gate_inp.weight", (e, h), i), (b + "ffn_gate_exps.weight", (e, eff, h), i),
                    (b + "ffn_up_exps.weight", (e, eff, h), i), (b + "ffn_down_exps.weight", (e, h, eff), i),
                    (b + "ffn_gate_shexp.weight", (sff, h), i), (b + "ffn_up_shexp.weight", (sff, h), i),
                    (b + "ffn_down_shexp.weight", (h, sff), i), (b + "ffn_gate_inp_shexp.weight", (h,), i)]
        else:
            out += [(b + "ffn_gate.weight", (m["ffn"], h), i), (b + "ffn_up.weight", (m["ffn"], h), i),
                    (b + "ffn_down.weight", (h, m["ffn"]), i)]
        if i >= m["layers"]:
            out += [(b + "nextn.eh_proj.weight", (h, 2 * h), i), (b + "nextn.enorm.weight", (h,), i),
                    (b + "nextn.hnorm.weight", (h,), i), (b + "nextn.shared_head_norm.weight", (h,), i)]
    return out


# Gemma 4 (llama.cpp's gemma4): sliding layers and every 6th full one with its own KV heads
# and 512-wide heads, K = V there (no attn_v); the 26B-A4B's layers have the dense MLP and
# 128 routed experts side by side. Tied embeddings; the full layers' proportional RoPE as
# rope_freqs.
GEMMAS = {
    "gemma-4-31b": dict(layers=60, hidden=5376, ffn=21504, heads=32, kv=16, head_dim=256, kv_full=4,
                        head_dim_full=512, vocab=262144, window=1024, experts=0, used=0, expert_ffn=0),
    "gemma-4-26b-a4b": dict(layers=30, hidden=2816, ffn=2112, heads=16, kv=8, head_dim=256, kv_full=2,
                            head_dim_full=512, vocab=262144, window=1024, experts=128, used=8, expert_ffn=704),
}


def gemma_tensors(m):
    h, heads = m["hidden"], m["heads"]
    out = [("token_embd.weight", (m["vocab"], h), None), ("output_norm.weight", (h,), None),
           ("rope_freqs.weight", (m["head_dim_full"] // 2,), None)]
    for i in range(m["layers"]):
        b, full = f"blk.{i}.", (i + 1) % 6 == 0
        hd, kv = (m["head_dim_full"], m["kv_full"]) if full else (m["head_dim"], m["kv"])
        out += [(b + n, (h,), i) for n in ("attn_norm.weight", "post_attention_norm.weight", "ffn_norm.weight",
                                           "post_ffw_norm.weight")]
        out += [(b + "attn_q.weight", (heads * hd, h), i), (b + "attn_k.weight", (kv * hd, h), i),
                (b + "attn_output.weight", (h, heads * hd), i), (b + "attn_q_norm.weight", (hd,), i),
                (b + "attn_k_norm.weight", (hd,), i), (b + "layer_output_scale.weight", (1,), i),
                (b + "ffn_gate.weight", (m["ffn"], h), i), (b + "ffn_up.weight", (m["ffn"], h), i),
                (b + "ffn_down.weight", (h, m["ffn"]), i)]
        if not full:
            out.append((b + "attn_v.weight", (kv * hd, h), i))
        if m["experts"]:
            e, eff = m["experts"], m["expert_ffn"]
            out += [(b + "ffn_gate_inp.weight", (e, h), i), (b + "ffn_gate_inp.scale", (h,), i),
                    (b + "ffn_down_exps.scale", (e,), i), (b + "ffn_gate_up_exps.weight", (e, 2 * eff, h), i),
                    (b + "ffn_down_exps.weight", (e, h, eff), i)]
            out += [(b + n, (h,), i) for n in ("pre_ffw_norm_2.weight", "post_ffw_norm_1.weight", "post_ffw_norm_2.weight")]
    return out


def gemma_data(m):
    """The tensors a reader needs the values of (the rest stay a hole): the full layers'
    proportional RoPE as llama.cpp writes it, a quarter of the pairs turning."""
    half = m["head_dim_full"] // 2
    return {"rope_freqs.weight": np.array([1.0] * (half // 4) + [1e30] * (half - half // 4), dtype=np.float32)}


def gemma_keys(wr, m):
    full = [(i + 1) % 6 == 0 for i in range(m["layers"])]
    wr.add_feed_forward_length(m["ffn"])
    wr.add_head_count(m["heads"])
    wr.add_head_count_kv([m["kv_full"] if f else m["kv"] for f in full])
    wr.add_key_length(m["head_dim_full"])
    wr.add_value_length(m["head_dim_full"])
    wr.add_key_length_swa(m["head_dim"])
    wr.add_value_length_swa(m["head_dim"])
    wr.add_rope_dimension_count(m["head_dim_full"])
    wr.add_rope_dimension_count_swa(m["head_dim"])
    wr.add_rope_freq_base(1000000.0)
    wr.add_rope_freq_base_swa(10000.0)
    wr.add_sliding_window(m["window"])
    wr.add_sliding_window_pattern([not f for f in full])
    wr.add_shared_kv_layers(0)
    wr.add_embedding_length_per_layer_input(0)
    wr.add_final_logit_softcapping(30.0)
    wr.add_layer_norm_rms_eps(1e-6)
    if m["experts"]:
        wr.add_expert_count(m["experts"])
        wr.add_expert_used_count(m["used"])
        wr.add_expert_feed_forward_length(m["expert_ffn"])


def stored_type(name, dims, layer, layers, qtype, tied=False):
    if len(dims) == 1 or name.endswith("ffn_gate_inp.weight"):
        return Q.F32  # norms, biases, scales and the router stay f32, as llama-quantize leaves them
    if dims[-1] % 32:
        return Q.F32  # rows shorter than a block (the conv1d kernel)
    t = q4_k_m(name, layer, layers, tied) if qtype == "Q4_K_M" else {"Q8_0": Q.Q8_0, "F16": Q.F16, "Q6_K": Q.Q6_K}[qtype]
    if dims[-1] % 256:  # llama-quantize's fallback for rows not of whole K-quant blocks
        return {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}.get(t, t)
    return t


def write(path, model, qtype):
    """Writes `model` (a SHAPES, HYBRIDS or GEMMAS key) stored as `qtype` ("Q4_K_M", "Q6_K",
    "Q8_0" or "F16") to path; returns the bytes of its tensors (the weights a full file would hold)."""
    hybrid, gemma = HYBRIDS.get(model), GEMMAS.get(model)
    if gemma:
        arch, n, h, vocab, ff = "gemma4", gemma["layers"], gemma["hidden"], gemma["vocab"], 0
        ne = 0  # gemma_keys writes the experts' keys
    elif hybrid:
        arch, n, h, heads, kv, hd, vocab = (hybrid[k] for k in ("arch", "layers", "hidden", "heads", "kv", "head_dim", "vocab"))
        ff, ne, used, eff = hybrid["ffn"], hybrid["experts"], hybrid["used"], hybrid["expert_ffn"]
    else:
        arch, n, h, ff, heads, kv, hd, vocab, ne, used, eff = SHAPES[model][:11]
    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_block_count(n + (hybrid["mtp"] if hybrid else 0))
    wr.add_context_length(262144 if hybrid or gemma else 131072 if arch == "llama" else 32768)
    wr.add_embedding_length(h)
    if gemma:
        gemma_keys(wr, gemma)
    else:
        if ff:
            wr.add_feed_forward_length(ff)
        wr.add_head_count(heads)
        wr.add_head_count_kv(kv)
        wr.add_key_length(hd)
        wr.add_value_length(hd)
        wr.add_rope_dimension_count(hybrid["rotary"] if hybrid else hd)
        wr.add_rope_freq_base(10000000.0 if hybrid else 500000.0 if arch == "llama" else 1000000.0)
        wr.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
    wr.add_file_type({"Q4_K_M": 15, "Q6_K": 18, "Q8_0": 7, "F16": 1}[qtype])
    if ne:
        wr.add_expert_count(ne)
        wr.add_expert_used_count(used)
        wr.add_expert_feed_forward_length(eff)
    if hybrid:
        wr.add_uint32(f"{arch}.nextn_predict_layers", hybrid["mtp"])
        wr.add_full_attention_interval(hybrid["interval"])
        wr.add_rope_dimension_sections([11, 11, 10, 0])
        wr.add_ssm_conv_kernel(hybrid["conv"])
        wr.add_ssm_state_size(hybrid["k_dim"])
        wr.add_ssm_group_count(hybrid["k_heads"])
        wr.add_ssm_time_step_rank(hybrid["v_heads"])
        wr.add_ssm_inner_size(hybrid["v_heads"] * hybrid["v_dim"])
        if ne:
            wr.add_expert_shared_feed_forward_length(hybrid["shared_ffn"])
    tokens = ["<s>", "</s>"] + [f"t{i}" for i in range(vocab - 2)]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_types([3, 3] + [1] * (vocab - 2))
    wr.add_token_merges(["t 1"])
    wr.add_bos_token_id(0)
    wr.add_eos_token_id(1)
    wr.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    sizes, offsets = [], {}
    listed = gemma_tensors(gemma) if gemma else hybrid_tensors(hybrid) if hybrid else tensors(SHAPES[model])
    for name, dims, layer in listed:
        t = stored_type(name, dims, layer, n, qtype, tied=bool(gemma))
        block, type_bytes = gguf.GGML_QUANT_SIZES[t]
        nbytes = int(np.prod(dims)) // block * type_bytes
        wr.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=t)
        offsets[name] = sum((b + 31) // 32 * 32 for b in sizes)
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
        for name, values in (gemma_data(gemma) if gemma else {}).items():
            f.seek(data_start + offsets[name])
            f.write(values.tobytes())
    return sum(sizes)
