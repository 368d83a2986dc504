#!/usr/bin/env python3
"""Writes the tiny Nemotron-H with LatentMoE (nemotron_h_latent, gen_nemotron_h.py) with a random
Nemotron-3-Super-style multi-token-prediction (MTP) head, and golden logits of that head
computed in float64 numpy.

Nemotron-3-Super ships one MTP step (num_nextn_predict_layers 1) of the blocks named by
mtp_hybrid_override_pattern ("*E"), as vLLM's NemotronHMTP reads them: "mtp.layers.0.*" an
attention block, "mtp.layers.1.*" an MoE block, each x + mixer(rmsnorm(x, norm)) as the model's
blocks are. For a row (token t, incoming hidden h, position p):
  x = mtp.layers.0.eh_proj @ [rmsnorm(embed[t], enorm) ; rmsnorm(h, hnorm)]
  x = x + attention(rmsnorm(x, mtp.layers.0.norm))    GQA, no RoPE, causal over the rows
  x = x + moe(rmsnorm(x, mtp.layers.1.norm))           the model's MoE: sigmoid router with
                                                       the score bias for selection only,
                                                       LatentMoE, shared expert
  logits = lm_head @ rmsnorm(x, mtp.layers.1.final_layernorm)
where rmsnorm(v, w) = v / sqrt(mean(v^2) + eps) * w. The embedding and lm_head are the model's.
transformers has no Nemotron-H MTP module; with --check-transformers (needs torch and
transformers) the script runs transformers' NemotronHBlock for the two blocks, with the same
weights on the same eh_proj output, and fails unless their output agrees with the numpy one.

Output (default build/golden/models/nemotron_h_mtp; tests/gen/golden_gguf.py writes it at test
time), as gen_qwen3_5_mtp.py's: config.json (num_nextn_predict_layers 1,
mtp_hybrid_override_pattern "*E"), model.safetensors (the source tensors and random f32
"mtp.*"), the text model's golden files, mtp_golden.json, mtp_hidden_<i>.f32, mtp_logits_<i>.f32.

  python tests/gen/gen_nemotron_h_mtp.py [--src DIR] [--out DIR] [--check-transformers]
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import load_file

from gen_qwen3_5_mtp import causal_gqa, random_tensors, write_folder, write_meta

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "golden", "models")
SEED = 6105
PATTERN = "*E"
MIN_ROUTER_MARGIN = 1e-3
TRANSFORMERS_TOLERANCE = 1e-4
ATTN, MOE = "mtp.layers.0.", "mtp.layers.1."


class Config:
    def __init__(self, c):
        self.H = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.nkv = c["num_key_value_heads"]
        self.hd = c["head_dim"]
        self.eps = c["layer_norm_epsilon"]
        self.E = c["n_routed_experts"]
        self.k = c["num_experts_per_tok"]
        self.I = c["moe_intermediate_size"]
        self.Is = c["moe_shared_expert_intermediate_size"]
        self.L = c["moe_latent_size"]
        self.scale = c["routed_scaling_factor"]
        self.vocab = c["vocab_size"]


def mtp_shapes(c):
    """Name -> (shape, kind): "norm" a norm weight (around 1), "matrix" scaled by 1/sqrt(fan_in),
    "bias" the router's score-correction bias."""
    norm, mat = "norm", "matrix"
    out = {
        ATTN + "enorm.weight": ((c.H,), norm),
        ATTN + "hnorm.weight": ((c.H,), norm),
        ATTN + "eh_proj.weight": ((c.H, 2 * c.H), mat),
        ATTN + "norm.weight": ((c.H,), norm),
        ATTN + "mixer.q_proj.weight": ((c.nh * c.hd, c.H), mat),
        ATTN + "mixer.k_proj.weight": ((c.nkv * c.hd, c.H), mat),
        ATTN + "mixer.v_proj.weight": ((c.nkv * c.hd, c.H), mat),
        ATTN + "mixer.o_proj.weight": ((c.H, c.nh * c.hd), mat),
        MOE + "norm.weight": ((c.H,), norm),
        MOE + "final_layernorm.weight": ((c.H,), norm),
        MOE + "mixer.gate.weight": ((c.E, c.H), mat),
        MOE + "mixer.gate.e_score_correction_bias": ((c.E,), "bias"),
        MOE + "mixer.fc1_latent_proj.weight": ((c.L, c.H), mat),
        MOE + "mixer.fc2_latent_proj.weight": ((c.H, c.L), mat),
        MOE + "mixer.shared_experts.up_proj.weight": ((c.Is, c.H), mat),
        MOE + "mixer.shared_experts.down_proj.weight": ((c.H, c.Is), mat),
    }
    for e in range(c.E):
        out[f"{MOE}mixer.experts.{e}.up_proj.weight"] = ((c.I, c.L), mat)
        out[f"{MOE}mixer.experts.{e}.down_proj.weight"] = ((c.L, c.I), mat)
    return out


def draw(c, rng):
    """random_tensors draws norms around 0 (zero-centred) and biases as norms: shift the norm
    weights to around 1 (Nemotron-H's norms multiply by the weight) and scale the bias."""
    shapes = mtp_shapes(c)
    out = random_tensors(shapes, rng)
    for name, (_, kind) in shapes.items():
        if kind == "norm":
            out[name] = (out[name] + 1.0).astype(np.float32)
        elif kind == "bias":
            out[name] = (0.5 * out[name]).astype(np.float32)
    return out


# ---- the numpy forward, float64 ----

def rmsnorm(v, w, eps):
    return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps) * w


def relu2(v):
    return np.maximum(v, 0.0) ** 2


def attention(w, c, a):
    T = a.shape[0]
    q = (a @ w[ATTN + "mixer.q_proj.weight"].T).reshape(T, c.nh, c.hd)
    k = (a @ w[ATTN + "mixer.k_proj.weight"].T).reshape(T, c.nkv, c.hd)
    v = (a @ w[ATTN + "mixer.v_proj.weight"].T).reshape(T, c.nkv, c.hd)
    return np.concatenate(causal_gqa(q, k, v, c), axis=-1) @ w[ATTN + "mixer.o_proj.weight"].T


def moe(w, c, m):
    """The routed experts in the latent space plus the shared expert; also the least gap, per
    row, between the k-th and (k+1)-th biased score (how far rounding may move a choice)."""
    scores = 1.0 / (1.0 + np.exp(-(m @ w[MOE + "mixer.gate.weight"].T)))
    biased = scores + w[MOE + "mixer.gate.e_score_correction_bias"]
    order = np.argsort(-biased, axis=-1, kind="stable")
    top = order[:, :c.k]
    ranked = np.take_along_axis(biased, order, axis=-1)
    margin = float((ranked[:, c.k - 1] - ranked[:, c.k]).min())
    weights = np.take_along_axis(scores, top, axis=-1)
    weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20) * c.scale
    latent = m @ w[MOE + "mixer.fc1_latent_proj.weight"].T
    routed = np.zeros_like(latent)
    for t in range(m.shape[0]):
        for e, wt in zip(top[t], weights[t]):
            up = w[f"{MOE}mixer.experts.{e}.up_proj.weight"] @ latent[t]
            routed[t] += wt * (w[f"{MOE}mixer.experts.{e}.down_proj.weight"] @ relu2(up))
    out = routed @ w[MOE + "mixer.fc2_latent_proj.weight"].T
    sp = MOE + "mixer.shared_experts."
    return out + relu2(m @ w[sp + "up_proj.weight"].T) @ w[sp + "down_proj.weight"].T, margin


def eh_input(w, c, tokens, hidden):
    e = w["backbone.embeddings.weight"][np.asarray(tokens)]
    # Embedding half first, hidden half second.
    cat = np.concatenate([rmsnorm(e, w[ATTN + "enorm.weight"], c.eps),
                          rmsnorm(hidden, w[ATTN + "hnorm.weight"], c.eps)], axis=-1)
    return cat @ w[ATTN + "eh_proj.weight"].T


def blocks(w, c, x):
    x = x + attention(w, c, rmsnorm(x, w[ATTN + "norm.weight"], c.eps))
    out, margin = moe(w, c, rmsnorm(x, w[MOE + "norm.weight"], c.eps))
    return x + out, margin


def mtp_forward(w, c, tokens, hidden):
    x, margin = blocks(w, c, eh_input(w, c, tokens, hidden))
    return rmsnorm(x, w[MOE + "final_layernorm.weight"], c.eps) @ w["lm_head.weight"].T, margin


# ---- the optional cross-check against transformers ----

def check_transformers(w64, config, c, tokens, hidden):
    import torch
    import transformers
    from transformers.models.nemotron_h import modeling_nemotron_h as mn

    keys = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "hybrid_override_pattern",
                                                         "num_nextn_predict_layers", "mtp_hybrid_override_pattern")}
    cfg = mn.NemotronHConfig(**{**keys, "layers_block_type": ["attention", "moe"], "num_hidden_layers": 2})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # a standalone block gets no dispatch otherwise
    layers = [mn.NemotronHBlock(cfg, i).to(torch.float64).eval() for i in range(2)]
    loaded = set()
    with torch.no_grad():
        for prefix, layer in zip((ATTN, MOE), layers):
            for name, p in layer.named_parameters():
                if name in ("mixer.experts.up_proj", "mixer.experts.down_proj"):  # transformers stacks them
                    value = np.stack([w64[f"{prefix}mixer.experts.{e}.{name.split('.')[-1]}.weight"]
                                      for e in range(c.E)])
                    loaded |= {f"{prefix}mixer.experts.{e}.{name.split('.')[-1]}.weight" for e in range(c.E)}
                else:
                    value = w64.get(prefix + name)
                    assert value is not None, f"no checkpoint tensor for transformers parameter {name}"
                    loaded.add(prefix + name)
                assert tuple(p.shape) == value.shape, (name, tuple(p.shape), value.shape)
                p.copy_(torch.from_numpy(value))
            for name, b in layer.named_buffers():  # the router's score-correction bias
                if prefix + name in w64:
                    b.copy_(torch.from_numpy(w64[prefix + name]))
                    loaded.add(prefix + name)
    outside = {ATTN + "enorm.weight", ATTN + "hnorm.weight", ATTN + "eh_proj.weight", MOE + "final_layernorm.weight"}
    unused = sorted(n for n in w64 if n.startswith("mtp.") and n not in loaded | outside)
    assert not unused, f"head tensors transformers' blocks do not use: {unused}"

    x = eh_input(w64, c, tokens, hidden)
    ours, _ = blocks(w64, c, x)
    T = len(tokens)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)[None, None]
    h = torch.from_numpy(x)[None]
    with torch.no_grad():
        for layer in layers:
            out = layer(h, attention_mask=mask)
            h = out[0] if isinstance(out, tuple) else out
    theirs = h[0].numpy()
    err = np.abs(theirs - ours).max() / np.abs(ours).max()
    print(f"  transformers {transformers.__version__} (torch {torch.__version__}) NemotronHBlock "
          f"attention + moe, f64, {T} rows: max rel err {err:.2e}")
    assert err < TRANSFORMERS_TOLERANCE, err


def write_head(src, out, check=False, quiet=False):
    say = (lambda *a: None) if quiet else print
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["num_nextn_predict_layers"] = 1
    config["mtp_hybrid_override_pattern"] = PATTERN
    c = Config(config)

    rng = np.random.default_rng(SEED)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    assert not any(n.startswith("mtp.") for n in tensors), "source already has an MTP head"
    tensors.update(draw(c, rng))
    w64 = {n: v.astype(np.float64) for n, v in tensors.items()}
    seqs, hiddens, hidden_files, logits_files, margins = write_folder(
        src, out, config, tensors, c.vocab, c.H, rng, lambda ids, hid: mtp_forward(w64, c, ids, hid), say)
    margin = min(margins)
    say(f"least gap between the k-th and (k+1)-th biased router score over all rows: {margin:.3e}")
    assert margin >= MIN_ROUTER_MARGIN, f"routing too close to a tie ({margin:.2e}); change SEED"
    if check:
        check_transformers(w64, config, c, seqs[-1], hiddens[-1].astype(np.float64))
    write_meta(out, {
        "reference": ("float64 numpy forward of tests/gen/gen_nemotron_h_mtp.py, stored as f32; its two blocks "
                      "are checked against transformers' NemotronHBlock by --check-transformers"),
        "sequences": seqs,
        "hidden": hidden_files,
        "logits": logits_files,
        "notes": (
            f"Nemotron-3-Super-style MTP head (num_nextn_predict_layers 1, mtp_hybrid_override_pattern "
            f"\"{PATTERN}\") of the text model of this folder, sharing its embedding and lm_head. Sequence i: "
            f"row r has token sequences[i][r], incoming hidden state row r of hidden[i] ([len, {c.H}] "
            f"little-endian f32) and position r; logits[i] is [len, {c.vocab}] little-endian f32. The hidden "
            f"rows are random, not the main model's. Per row: x = eh_proj @ [rmsnorm(embed, enorm) ; "
            f"rmsnorm(hidden, hnorm)], then the attention block (no RoPE, causal over earlier rows of the "
            f"sequence) and the LatentMoE block of mtp.layers.0 and .1, then lm_head @ rmsnorm(x, "
            f"mtp.layers.1.final_layernorm). Least gap between a row's k-th and (k+1)-th biased router "
            f"score: {margin:.2e}. golden.json and logits_*.f32 are the unchanged text model's, copied from "
            f"{os.path.basename(os.path.normpath(src))}."),
    }, say)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.join(MODELS, "nemotron_h_latent"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "build", "golden", "models", "nemotron_h_mtp"))
    ap.add_argument("--check-transformers", action="store_true",
                    help="also compare the two blocks with transformers' NemotronHBlock (needs torch)")
    args = ap.parse_args()
    write_head(args.src, args.out, args.check_transformers)


if __name__ == "__main__":
    main()
