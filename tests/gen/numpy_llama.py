"""numpy_llama.py — a float64 numpy forward pass of transformers' Llama, Qwen3 and
Qwen3-MoE (no biases; Qwen3's per-head q/k RMSNorm when the weights have it; a layer with
a router `mlp.gate` runs its experts: softmax over all, top-k, renormalised when
norm_topk_prob, lowest index first among equal scores), for golden logits of
models whose weights only numpy can read here (GGUF K-quants through the `gguf`
package, FP8 checkpoints). check_against_transformers() first checks it against
transformers' own logits of the tiny f32 fixtures (tests/gen/gen_tiny_models.py), so
golden data made with it rests on transformers, not on sparkd.

forward(w, c, tokens): w maps Hugging Face tensor names to arrays, c is the config (an
object with the config.json keys as attributes).
"""
import json
import os
import types

import numpy as np
from safetensors.numpy import load_file


def inv_freq(c, hd):
    rp = c.rope_parameters
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    if rp.get("rope_type") != "llama3":
        return inv
    # transformers' _compute_llama3_parameters
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    wavelen = 2 * np.pi / inv
    scaled = np.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return np.where(medium, smoothed, scaled)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rope(x, pos, inv):
    ang = pos[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)[:, None, :]  # [T, 1, hd]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * np.cos(ang) + rot * np.sin(ang)


def mlp(w, p, h):
    g = h @ w[p + "gate_proj.weight"].T
    return (g / (1 + np.exp(-g)) * (h @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def moe(w, c, p, h):
    logits = h @ w[p + "mlp.gate.weight"].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :c.num_experts_per_tok]
    weights = np.take_along_axis(probs, top, axis=-1)
    if c.norm_topk_prob:
        weights /= weights.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for e, wt in zip(top[t], weights[t]):
            out[t] += wt * mlp(w, f"{p}mlp.experts.{e}.", h[t:t + 1])[0]
    return out


def forward(w, c, tokens):
    """Logits [T, vocab] of one sequence."""
    tokens = np.asarray(tokens)
    T = len(tokens)
    nh, nkv = c.num_attention_heads, c.num_key_value_heads
    hd = getattr(c, "head_dim", None) or c.hidden_size // nh
    pos = np.arange(T, dtype=np.float64)
    inv = inv_freq(c, hd)
    x = w["model.embed_tokens.weight"][tokens]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for layer in range(c.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], c.rms_norm_eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], c.rms_norm_eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], c.rms_norm_eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        out = np.empty((T, nh, hd))
        for head in range(nh):
            kv = head // (nh // nkv)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + causal
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, head] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        x = x + (moe(w, c, p, h) if p + "mlp.gate.weight" in w else mlp(w, p + "mlp.", h))
    x = rms_norm(x, w["model.norm.weight"], c.rms_norm_eps)
    head = w["model.embed_tokens.weight"] if c.tie_word_embeddings else w["lm_head.weight"]
    return x @ head.T


def check_against_transformers(models=("tests/golden/models/llama", "tests/golden/models/qwen3",
                                       "tests/golden/models/qwen3_moe")):
    for folder in models:
        with open(os.path.join(folder, "config.json")) as f:
            c = types.SimpleNamespace(**json.load(f))
        w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
        with open(os.path.join(folder, "golden.json")) as f:
            g = json.load(f)
        for seq, fn in zip(g["sequences"], g["logits"]):
            ref = np.fromfile(os.path.join(folder, fn), "<f4").reshape(len(seq), -1)
            err = np.abs(forward(w, c, seq) - ref).max() / np.abs(ref).max()
            assert err < 1e-5, f"the numpy forward pass disagrees with transformers on {folder}: {err:.2e}"
