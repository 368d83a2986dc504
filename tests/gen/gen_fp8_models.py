#!/usr/bin/env python3
# gen_fp8_models.py — tiny FP8 checkpoints as Hugging Face folders, and their golden logits.
#
#   llama_fp8_block    Llama, quantization_config {"quant_method": "fp8",
#                      "weight_block_size": [128, 128]}: every linear weight e4m3 with
#                      `weight_scale_inv` f32 block scales, as Qwen3-*-FP8 and DeepSeek ship
#                      (intermediate 320, so the last block of rows and columns is partial).
#   qwen3_fp8_channel  Qwen3 (q/k norm, tied embeddings) without weight_block_size: every
#                      linear weight e4m3 with a per-output-channel `weight_scale` [rows, 1].
# Embeddings, norms and the LM head stay BF16, as those checkpoints keep them.
#
# The quantizer is written here (numpy has no float8): scale = amax / 448 per block or
# channel, e4m3 rounded to nearest, ties to even. Dequantization is e4m3 * scale, what
# transformers' FP8 integration computes (weight_dequant: x * weight_scale_inv). The
# golden logits come from numpy_llama's float64 forward pass over those dequantized
# weights, that pass first checked against transformers' logits of the tiny f32 fixtures.
#
# usage: gen_fp8_models.py [OUT_DIR]   (default: tests/golden/models)
import json
import os
import struct
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402
from gen_loader_golden import model_tensors  # noqa: E402

E4M3_MAX = 448.0


def e4m3_values():
    """The f32 value of every e4m3 byte (NaN for 0x7F and 0xFF)."""
    v = np.arange(256)
    sign = np.where(v >> 7, -1.0, 1.0)
    exp, man = (v >> 3) & 15, v & 7
    mag = np.where(exp == 0, man * 2.0 ** -9, (8 + man) * 2.0 ** (exp - 10.0))
    out = sign * mag
    out[[0x7F, 0xFF]] = np.nan
    return out


E4M3 = e4m3_values()
POSITIVE = E4M3[:0x7F]  # codes 0..0x7E, increasing


def e4m3_encode(x):
    """Nearest e4m3 byte of each value (ties to the even code), saturating at 448."""
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(POSITIVE, a), 0, len(POSITIVE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - POSITIVE[lo], POSITIVE[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def quantize(w, block):
    """w [n, k] -> (e4m3 bytes [n, k], f32 scales): block (rows, cols) or None per channel."""
    n, k = w.shape
    if block is None:
        scale = np.abs(w).max(axis=1, keepdims=True) / E4M3_MAX
        return e4m3_encode(w / scale), scale.astype(np.float32)
    br, bc = block
    gr, gc = -(-n // br), -(-k // bc)
    scale = np.empty((gr, gc), dtype=np.float32)
    for i in range(gr):
        for j in range(gc):
            scale[i, j] = np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max() / E4M3_MAX
    full = np.repeat(np.repeat(scale, br, axis=0), bc, axis=1)[:n, :k]
    return e4m3_encode(w / full), scale


def dequantize(q, scale, block):
    v = E4M3[q]
    if block is None:
        return v * scale.astype(np.float64)
    n, k = q.shape
    return v * np.repeat(np.repeat(scale.astype(np.float64), block[0], axis=0), block[1], axis=1)[:n, :k]


def to_bf16(a):
    """f32 -> bf16 bits, round to nearest even."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, shape, bytes)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make_model(out, arch, block, seed):
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=320, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
                  rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    if arch == "llama":
        cfg = dict(common, architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=False,
                   rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    else:
        cfg = dict(common, architectures=["Qwen3ForCausalLM"], model_type="qwen3", tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
    if block:
        qc["weight_block_size"] = list(block)
    cfg["quantization_config"] = qc
    c = types.SimpleNamespace(**cfg)
    rng = np.random.default_rng(seed)
    tensors, _ = model_tensors(c, "qwen3" if arch == "qwen3" else "llama", rng)
    stored, ref = {}, {}
    for name, a in tensors.items():
        a = a.astype(np.float32)
        if a.ndim == 2 and name not in ("model.embed_tokens.weight", "lm_head.weight"):
            a = a * np.sqrt(64 / a.shape[1])  # the tiny fixtures' gain (see gen_q4_k_m_models.py)
            q, scale = quantize(a, block)
            stored[name] = ("F8_E4M3", q.shape, q.tobytes())
            sname = name + ("_scale_inv" if block else "_scale")
            stored[sname] = ("F32", scale.shape, scale.astype("<f4").tobytes())
            ref[name] = dequantize(q, scale, block)
        else:
            bits = to_bf16(a)
            stored[name] = ("BF16", a.shape, bits.astype("<u2").tobytes())
            ref[name] = bf16_values(bits)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    sequences = [[int(t) for t in rng.integers(0, c.vocab_size, n)] for n in (1, 7, 23, 40)]
    names = []
    for i, seq in enumerate(sequences):
        names.append(f"logits_{i}.f32")
        numpy_llama.forward(ref, c, seq).astype("<f4").tofile(os.path.join(out, names[-1]))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": "numpy float64 forward (checked against transformers' tiny llama and qwen3 "
                                "logits) over e4m3 * scale of model.safetensors",
                   "architecture": cfg["architectures"][0], "vocab_size": c.vocab_size, "sequences": sequences,
                   "logits": names}, f)
    print("wrote", out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/models"
    numpy_llama.check_against_transformers()
    # The encoder against the table: every finite code but -0 encodes to itself.
    finite = ~np.isnan(E4M3)
    codes = np.arange(256)[finite & (np.arange(256) != 0x80)]
    assert np.array_equal(e4m3_encode(E4M3[codes]), codes.astype(np.uint8))
    make_model(os.path.join(out, "llama_fp8_block"), "llama", (128, 128), 81)
    make_model(os.path.join(out, "qwen3_fp8_channel"), "qwen3", None, 82)


if __name__ == "__main__":
    main()
