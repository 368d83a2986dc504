#!/usr/bin/env python3
# gen_q4_k_m_models.py — tiny random models in GGUF K-quants and their golden logits.
#
# llama_q4_k_m: a Llama in Q4_K_M, llama.cpp's mix: every matrix Q4_K except the output
# matrix and, in some layers, attn_v and ffn_down, which are Q6_K (here layer 0 of 2, so
# one layer fuses q/k/v across two formats and one does not).
# qwen3_k_quants: a Qwen3 (per-head q/k norms, tied embeddings, no q/k permutation in
# GGUF) whose matrices are Q8_0, Q4_K and Q6_K, each format in every role across its two
# layers (attention q/k/v, output, the MLP's gate/up pair and down, the tied embedding),
# so every packed format meets every kernel a dense model runs.
# Sizes are the smallest whose every matrix row is whole 256-value super-blocks (hidden
# 256, intermediate 512, 4 heads of 64). K-quant blocks come from tests/gen/kquants.py
# (the `gguf` package has no K-quant quantizer), Q8_0 from gguf's own quantizer.
#
# The golden logits are computed from what the file holds as the `gguf` package reads it
# (GGUFReader, gguf.quants.dequantize), by numpy_llama's float64 forward pass, which is
# first checked against transformers' logits of the tiny f32 fixtures (within 1e-5 of the
# logits' scale), so the golden data rests on transformers, not on sparkd.
#
# usage: gen_q4_k_m_models.py [DIR]   (default: tests/golden/models)
#   writes DIR/<model>/model.gguf, golden.json, logits_<i>.f32 ([len, vocab] little-endian f32)
import importlib.metadata
import json
import os
import sys
import types

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kquants  # noqa: E402
import numpy_llama  # noqa: E402
from gen_loader_golden import GGUF_NAMES, model_tensors, write_gguf_model  # noqa: E402

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
Q6_K_TENSORS = {"output.weight", "blk.0.attn_v.weight", "blk.0.ffn_down.weight"}
MOSTLY_Q4_K_M = 15  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M


def q4_k_m(name):
    return Q.Q6_K if name in Q6_K_TENSORS else Q.Q4_K


# The Qwen3 mix: GGUF tensor kind -> format in layer 0 and layer 1.
QWEN3_MIX = {"attn_q": (Q.Q4_K, Q.Q8_0), "attn_k": (Q.Q4_K, Q.Q8_0), "attn_v": (Q.Q6_K, Q.Q8_0),
             "attn_output": (Q.Q8_0, Q.Q6_K), "ffn_gate": (Q.Q6_K, Q.Q8_0), "ffn_up": (Q.Q6_K, Q.Q8_0),
             "ffn_down": (Q.Q4_K, Q.Q6_K)}
MOSTLY_Q6_K = 18  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q6_K (the file's most common type is a label only)


def qwen3_mix(name):
    if name == "token_embd.weight":
        return Q.Q6_K
    parts = name.split(".")
    if parts[0] != "blk" or parts[2] not in QWEN3_MIX:
        return None  # norms stay f32
    return QWEN3_MIX[parts[2]][int(parts[1])]


def quantize_any(a, qtype):
    return kquants.quantize(a, qtype) if qtype in (Q.Q4_K, Q.Q6_K) else gguf.quants.quantize(a, qtype)


# ---- reading the file back as gguf does --------------------------------------------------
def unpermute(a, n_head):
    # Inverse of llama.cpp's LlamaModel.permute (rows of each head interleaved back).
    return a.reshape(n_head, a.shape[0] // n_head // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def read_back(path, c, permuted):
    hf_of = {v: k for k, v in GGUF_NAMES.items()}
    w = {}
    for t in gguf.GGUFReader(path).tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        a = a.reshape([int(d) for d in reversed(t.shape)])
        name = t.name
        if name == "token_embd.weight":
            w["model.embed_tokens.weight"] = a
        elif name == "output_norm.weight":
            w["model.norm.weight"] = a
        elif name == "output.weight":
            w["lm_head.weight"] = a
        elif name.startswith("blk."):
            _, layer, kind, suffix = name.split(".")
            rest = hf_of[kind]
            if permuted and rest == "self_attn.q_proj":
                a = unpermute(a, c.num_attention_heads)
            elif permuted and rest == "self_attn.k_proj":
                a = unpermute(a, c.num_key_value_heads)
            w[f"model.layers.{layer}.{rest}.{suffix}"] = a
    return w


def scaled_tensors(c, arch, rng):
    tensors, hd = model_tensors(c, arch, rng)
    # model_tensors draws every matrix with standard deviation 0.1 whatever its fan-in; at
    # hidden 256 that grows the residual stream layer by layer. Scaled to the gain of the
    # tiny fixtures (fan-in 64), activations stay O(1) as in a trained model, so the GPU's
    # 16-bit activations are compared at their usual precision.
    for name, a in tensors.items():
        if a.ndim == 2 and name != "model.embed_tokens.weight":
            tensors[name] = (a.astype(np.float32) * np.sqrt(64 / a.shape[1])).astype(a.dtype)
    return tensors, hd


def write_golden(out, path, c, rng, family, permuted):
    w = read_back(path, c, permuted)
    sequences = [[int(t) for t in rng.integers(0, c.vocab_size, n)] for n in (1, 7, 23, 40)]
    names = []
    for i, seq in enumerate(sequences):
        names.append(f"logits_{i}.f32")
        numpy_llama.forward(w, c, seq).astype("<f4").tofile(os.path.join(out, names[-1]))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": f"numpy float64 {family} forward (checked against transformers' tiny "
                                f"{family.lower()} logits) on gguf {importlib.metadata.version('gguf')}'s "
                                "dequantization of model.gguf",
                   "architecture": f"{family}ForCausalLM", "vocab_size": c.vocab_size, "sequences": sequences,
                   "logits": names}, f)
    print("wrote", out)


def llama_q4_k_m(out):
    c = types.SimpleNamespace(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                              max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                              rope_parameters=LLAMA3_ROPE)
    rng = np.random.default_rng(17)
    tensors, hd = scaled_tensors(c, "llama", rng)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.gguf")
    write_gguf_model(path, "llama", c, hd, tensors, qtype=q4_k_m, quantize=kquants.quantize,
                     file_type=MOSTLY_Q4_K_M)
    types_in_file = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert {n for n, t in types_in_file.items() if t == Q.Q6_K} == Q6_K_TENSORS, types_in_file
    write_golden(out, path, c, rng, "Llama", True)


def qwen3_k_quants(out):
    c = types.SimpleNamespace(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                              max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    rng = np.random.default_rng(18)
    tensors, hd = scaled_tensors(c, "qwen3", rng)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.gguf")
    write_gguf_model(path, "qwen3", c, hd, tensors, qtype=qwen3_mix, quantize=quantize_any, file_type=MOSTLY_Q6_K)
    types_in_file = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors if len(t.shape) == 2}
    assert types_in_file == {n: qwen3_mix(n) for n in types_in_file}, types_in_file
    assert {Q.Q8_0, Q.Q4_K, Q.Q6_K} == set(types_in_file.values()), types_in_file
    write_golden(out, path, c, rng, "Qwen3", False)


def main():
    models = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/models"
    numpy_llama.check_against_transformers()
    llama_q4_k_m(os.path.join(models, "llama_q4_k_m"))
    qwen3_k_quants(os.path.join(models, "qwen3_k_quants"))


if __name__ == "__main__":
    main()
