#!/usr/bin/env python3
"""Writes a tiny Qwen3.5-MoE checkpoint with a multi-token-prediction (MTP) head, and golden
logits of that head computed in float64 numpy.

Published Qwen3.5 checkpoints carry an MTP head ("mtp.*" tensors, config key
mtp_num_hidden_layers) used for speculative decoding: it combines the main model's hidden
state at one position with the token predicted there and guesses the token after that.
Its forward, for a row (token t, incoming hidden h, position p):
  x = fc @ [rmsnorm1p(embed[t], pre_fc_norm_embedding) ; rmsnorm1p(h, pre_fc_norm_hidden)]
  x = one gated full-attention + MoE decoder layer (as the main model's full_attention
      layers), causal over the rows of the same sequence, RoPE at position p
  logits = lm_head @ rmsnorm1p(x, mtp.norm)
where rmsnorm1p(v, w) = v / sqrt(mean(v^2) + eps) * (1 + w) (zero-centred weights). The
embedding and lm_head are the main model's own (mtp_use_dedicated_embeddings false).

The head is tested as a function of its rows, independently of the main model: the golden
data gives random incoming hidden vectors, so a mismatch points at the head alone.

Input: tests/golden/models/qwen3_5_moe (gen_qwen3_5.py).
Output, under tests/golden/models/qwen3_5_moe_mtp/:
  config.json              the source config plus, in text_config, mtp_num_hidden_layers 1
                           and mtp_use_dedicated_embeddings false
  model.safetensors        every source tensor unchanged, plus random f32 "mtp.*" tensors
  generation_config.json, golden.json, logits_<i>.f32
                           copied: the text model is unchanged, so its golden logits stand
  mtp_golden.json          token sequences and, per sequence, the hidden and logits file names
  mtp_hidden_<i>.f32       [len, hidden] little-endian f32: the incoming hidden state per row
  mtp_logits_<i>.f32       [len, vocab] little-endian f32: the MTP head's logits per row

The numpy forward is written from the description above. With --check-transformers (needs
torch and transformers) the script also runs transformers' Qwen3_5MoeDecoderLayer with the
same weights on the same fc output and fails unless the layer outputs agree.

  python tests/gen/gen_qwen3_5_mtp.py [--src DIR] [--out DIR] [--check-transformers]
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "golden", "models")
SEED = 6000
SEQUENCE_LENGTHS = (1, 5, 40)
HIDDEN_SCALE = 1.5  # incoming hidden states: larger than unit so the pre-fc norm matters
MIN_ROUTER_MARGIN = 1e-3
TRANSFORMERS_TOLERANCE = 1e-4
MTP = "mtp."
LAYER = MTP + "layers.0."


class Config:
    """The text_config keys the head needs (Qwen3-Next's config.json keeps them at the top
    level, and its checkpoints store the experts one by one and the embedding without
    Qwen3.5's language_model prefix)."""

    def __init__(self, tc, qwen3_next=False):
        self.qwen3_next = qwen3_next
        self.embedding = "model.embed_tokens.weight" if qwen3_next else "model.language_model.embed_tokens.weight"
        self.H = tc["hidden_size"]
        self.nh = tc["num_attention_heads"]
        self.nkv = tc["num_key_value_heads"]
        self.hd = tc["head_dim"]
        rp = tc["rope_parameters"]
        self.theta = rp["rope_theta"]
        self.rot = int(self.hd * rp.get("partial_rotary_factor", 1.0))
        self.eps = tc["rms_norm_eps"]
        self.E = tc["num_experts"]
        self.k = tc["num_experts_per_tok"]
        self.I = tc["moe_intermediate_size"]
        self.Is = tc["shared_expert_intermediate_size"]
        self.vocab = tc["vocab_size"]


def mtp_shapes(c):
    """Name -> (shape, kind) of every MTP tensor; kind "norm" is a zero-centred norm weight,
    "matrix" a weight scaled by 1/sqrt(fan_in), fan_in being the last dimension."""
    norm, mat = "norm", "matrix"
    return {
        MTP + "fc.weight": ((c.H, 2 * c.H), mat),
        MTP + "pre_fc_norm_embedding.weight": ((c.H,), norm),
        MTP + "pre_fc_norm_hidden.weight": ((c.H,), norm),
        MTP + "norm.weight": ((c.H,), norm),
        LAYER + "input_layernorm.weight": ((c.H,), norm),
        LAYER + "post_attention_layernorm.weight": ((c.H,), norm),
        LAYER + "self_attn.q_proj.weight": ((2 * c.nh * c.hd, c.H), mat),
        LAYER + "self_attn.k_proj.weight": ((c.nkv * c.hd, c.H), mat),
        LAYER + "self_attn.v_proj.weight": ((c.nkv * c.hd, c.H), mat),
        LAYER + "self_attn.o_proj.weight": ((c.H, c.nh * c.hd), mat),
        LAYER + "self_attn.q_norm.weight": ((c.hd,), norm),
        LAYER + "self_attn.k_norm.weight": ((c.hd,), norm),
        LAYER + "mlp.gate.weight": ((c.E, c.H), mat),
        **expert_shapes(c),
        LAYER + "mlp.shared_expert.gate_proj.weight": ((c.Is, c.H), mat),
        LAYER + "mlp.shared_expert.up_proj.weight": ((c.Is, c.H), mat),
        LAYER + "mlp.shared_expert.down_proj.weight": ((c.H, c.Is), mat),
        LAYER + "mlp.shared_expert_gate.weight": ((1, c.H), mat),
    }


def expert_shapes(c):
    """As the main layers are stored: Qwen3.5 stacks them (per expert I gate rows then I up
    rows), Qwen3-Next keeps each expert's projections apart."""
    if not c.qwen3_next:
        return {LAYER + "mlp.experts.gate_up_proj": ((c.E, 2 * c.I, c.H), "matrix"),
                LAYER + "mlp.experts.down_proj": ((c.E, c.H, c.I), "matrix")}
    out = {}
    for e in range(c.E):
        for name, shape in (("gate_proj", (c.I, c.H)), ("up_proj", (c.I, c.H)), ("down_proj", (c.H, c.I))):
            out[f"{LAYER}mlp.experts.{e}.{name}.weight"] = (shape, "matrix")
    return out


def stacked_experts(w, c):
    """[E, 2I, H] gate_up and [E, H, I] down, whichever way the checkpoint stores them."""
    if not c.qwen3_next:
        return w[LAYER + "mlp.experts.gate_up_proj"], w[LAYER + "mlp.experts.down_proj"]
    one = lambda e, name: w[f"{LAYER}mlp.experts.{e}.{name}.weight"]
    gate_up = np.stack([np.concatenate([one(e, "gate_proj"), one(e, "up_proj")]) for e in range(c.E)])
    return gate_up, np.stack([one(e, "down_proj") for e in range(c.E)])


def random_tensors(shapes, rng):
    """f32 tensors of `shapes` (name -> (shape, kind), as mtp_shapes gives them), drawn in
    sorted-name order so the tensors depend on the seed alone."""
    out = {}
    for name, (shape, kind) in sorted(shapes.items()):
        r = rng.standard_normal(shape)
        r = 0.2 * r if kind == "norm" else r / np.sqrt(shape[-1])
        out[name] = r.astype(np.float32)
    return out


# ---- the numpy forward, float64 ----

def rmsnorm1p(v, w, eps):
    return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps) * (1.0 + w)


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def silu(v):
    return v * sigmoid(v)


def partial_rope(x, pos, c):
    """x [T, heads, hd]: rotates the first c.rot dims of each head, rotate-half pairing
    (dim j with j + rot/2); the remaining dims pass through."""
    half = c.rot // 2
    inv = c.theta ** (-np.arange(half, dtype=np.float64) * 2.0 / c.rot)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:c.rot]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., c.rot:]], axis=-1)


def attention(w, c, a, pos):
    T = a.shape[0]
    qg = (a @ w[LAYER + "self_attn.q_proj.weight"].T).reshape(T, c.nh, 2 * c.hd)
    q, gate = qg[..., :c.hd], qg[..., c.hd:]
    k = (a @ w[LAYER + "self_attn.k_proj.weight"].T).reshape(T, c.nkv, c.hd)
    v = (a @ w[LAYER + "self_attn.v_proj.weight"].T).reshape(T, c.nkv, c.hd)
    q = partial_rope(rmsnorm1p(q, w[LAYER + "self_attn.q_norm.weight"], c.eps), pos, c)
    k = partial_rope(rmsnorm1p(k, w[LAYER + "self_attn.k_norm.weight"], c.eps), pos, c)
    heads = [o * sigmoid(gate[:, h]) for h, o in enumerate(causal_gqa(q, k, v, c))]
    return np.concatenate(heads, axis=-1) @ w[LAYER + "self_attn.o_proj.weight"].T


def causal_gqa(q, k, v, c):
    """Each query head's softmax attention, q [T, nh, hd] over k, v [T, nkv, hd] of the rows up
    to its own, scaled by 1/sqrt(hd): a list of nh [T, hd] outputs."""
    T = q.shape[0]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    heads = []
    for h in range(c.nh):
        g = h // (c.nh // c.nkv)  # GQA: consecutive query heads share a kv head
        s = q[:, h] @ k[:, g].T / np.sqrt(c.hd) + causal
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        heads.append(p @ v[:, g])
    return heads


def moe(w, c, m):
    """Routed top-k experts plus the gated shared expert; also returns the router logits."""
    logits = m @ w[LAYER + "mlp.gate.weight"].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :c.k]
    weights = np.take_along_axis(probs, top, axis=-1)
    weights /= weights.sum(axis=-1, keepdims=True)
    gate_up, down = stacked_experts(w, c)
    out = np.zeros_like(m)
    for t in range(m.shape[0]):
        for e, wt in zip(top[t], weights[t]):
            gu = gate_up[e] @ m[t]
            out[t] += wt * (down[e] @ (silu(gu[:c.I]) * gu[c.I:]))
    sp = LAYER + "mlp.shared_expert."
    shared = (silu(m @ w[sp + "gate_proj.weight"].T) * (m @ w[sp + "up_proj.weight"].T)) \
        @ w[sp + "down_proj.weight"].T
    out += sigmoid(m @ w[LAYER + "mlp.shared_expert_gate.weight"].T) * shared
    return out, logits


def fc_input(w, c, tokens, hidden):
    e = w[c.embedding][np.asarray(tokens)]
    # Embedding half first, hidden half second.
    cat = np.concatenate([rmsnorm1p(e, w[MTP + "pre_fc_norm_embedding.weight"], c.eps),
                          rmsnorm1p(hidden, w[MTP + "pre_fc_norm_hidden.weight"], c.eps)], axis=-1)
    return cat @ w[MTP + "fc.weight"].T


def decoder_layer(w, c, x, pos):
    x = x + attention(w, c, rmsnorm1p(x, w[LAYER + "input_layernorm.weight"], c.eps), pos)
    out, router = moe(w, c, rmsnorm1p(x, w[LAYER + "post_attention_layernorm.weight"], c.eps))
    return x + out, router


def mtp_forward(w, c, tokens, hidden):
    """Logits [T, vocab] and router logits [T, E] of one sequence at positions 0..T-1."""
    pos = np.arange(len(tokens), dtype=np.float64)
    x, router = decoder_layer(w, c, fc_input(w, c, tokens, hidden), pos)
    return rmsnorm1p(x, w[MTP + "norm.weight"], c.eps) @ w["lm_head.weight"].T, router


def router_margin(router):
    # The least gap between a row's 2nd and 3rd router logits: how far rounding may move
    # them before an implementation routes the row to another expert.
    top = -np.sort(-router, axis=-1)
    return float((top[:, 1] - top[:, 2]).min())


# ---- the optional cross-check against transformers ----

def check_transformers(w64, tc, c, tokens, hidden):
    import torch
    import transformers
    if c.qwen3_next:
        from transformers.models.qwen3_next import modeling_qwen3_next as mq
        config_class, layer_class, rotary_class = mq.Qwen3NextConfig, mq.Qwen3NextDecoderLayer, mq.Qwen3NextRotaryEmbedding
    else:
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mq
        config_class, layer_class = mq.Qwen3_5MoeTextConfig, mq.Qwen3_5MoeDecoderLayer
        rotary_class = mq.Qwen3_5MoeTextRotaryEmbedding

    idx = tc["layer_types"].index("full_attention")
    # The head's layer has the experts whatever the model's layer idx has (mlp_only_layers).
    cfg = config_class(**{k: v for k, v in tc.items() if k not in ("model_type", "mlp_only_layers")})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # a standalone layer gets no dispatch otherwise
    layer = layer_class(cfg, idx).to(torch.float64).eval()
    params = dict(layer.named_parameters())
    # transformers stacks Qwen3-Next's experts as Qwen3.5's; the checkpoint keeps them apart.
    gate_up, down = stacked_experts(w64, c)
    stacked = {LAYER + "mlp.experts.gate_up_proj": gate_up, LAYER + "mlp.experts.down_proj": down}
    loaded = set()
    with torch.no_grad():
        for name, p in params.items():
            src = LAYER + name
            value = stacked.get(src, w64.get(src))
            assert value is not None, f"no checkpoint tensor for transformers parameter {name}"
            assert tuple(p.shape) == value.shape, (name, tuple(p.shape), value.shape)
            p.copy_(torch.from_numpy(value))
            loaded.add(src)
    if c.qwen3_next:
        loaded |= {n for n in w64 if n.startswith(LAYER + "mlp.experts.")}
    unused = sorted(n for n in w64 if n.startswith(LAYER) and n not in loaded)
    assert not unused, f"checkpoint tensors transformers' layer does not use: {unused}"
    rotary = rotary_class(cfg).to(torch.float64)

    # transformers has no MTP module (it skips "mtp.*" on load), so only the decoder layer is
    # compared, on our fc output. Its RMSNorm and RoPE compute in f32 even in an f64 module,
    # so agreement is at f32 rounding, not f64.
    x = fc_input(w64, c, tokens, hidden)
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    ours, _ = decoder_layer(w64, c, x, pos)
    xt = torch.from_numpy(x)[None]
    ids = torch.arange(T)[None]
    # Text positions: Qwen3.5's M-RoPE takes them the same in all three axes.
    pe = rotary(xt, ids if c.qwen3_next else ids[None].expand(3, 1, T))
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)[None, None]
    with torch.no_grad():
        out = layer(xt, position_embeddings=pe, attention_mask=mask, position_ids=ids)
    out = out[0] if isinstance(out, tuple) else out
    theirs = out[0].numpy()
    err = np.abs(theirs - ours).max() / np.abs(ours).max()
    print(f"  transformers {transformers.__version__} (torch {torch.__version__}) "
          f"{type(layer).__name__}[{idx}], f64, {T} rows: max rel err {err:.2e}")
    assert err < TRANSFORMERS_TOLERANCE, err


def write_head(src, out, check=False, quiet=False):
    """The model of folder `src` with a random MTP head, and the head's golden logits, into
    folder `out` (see the module's docstring)."""
    say = (lambda *a: None) if quiet else print
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    qwen3_next = "text_config" not in config
    if qwen3_next:  # as vLLM reads Qwen3-Next's head: num_nextn_predict_layers, 1 where absent
        tc = config
        tc["num_nextn_predict_layers"] = 1
    else:
        tc = config["text_config"]
        tc["mtp_num_hidden_layers"] = 1
        tc["mtp_use_dedicated_embeddings"] = False
    c = Config(tc, qwen3_next)

    rng = np.random.default_rng(SEED + (1 if qwen3_next else 0))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    assert not any(n.startswith(MTP) for n in tensors), "source already has an MTP head"
    assert all(v.dtype == np.float32 for v in tensors.values())
    tensors.update(random_tensors(mtp_shapes(c), rng))
    w64 = {n: v.astype(np.float64) for n, v in tensors.items()}

    def forward(ids, hid):
        logits, router = mtp_forward(w64, c, ids, hid)
        return logits, router_margin(router)

    seqs, hiddens, hidden_files, logits_files, margins = write_folder(src, out, config, tensors, c.vocab, c.H,
                                                                      rng, forward, say)
    margin = min(margins)
    say(f"least router logit gap between 2nd and 3rd expert over all rows: {margin:.3e}")
    assert margin >= MIN_ROUTER_MARGIN, f"routing too close to a tie ({margin:.2e}); change SEED"

    if check:
        check_transformers(w64, tc, c, seqs[-1], hiddens[-1].astype(np.float64))
    layer_class = "Qwen3NextDecoderLayer" if qwen3_next else "Qwen3_5MoeDecoderLayer"
    experts = ("one by one (experts.E.gate_proj / up_proj [I, H], down_proj [H, I])" if qwen3_next else
               "stacked (experts.gate_up_proj [E, 2I, H], gate rows first; experts.down_proj [E, H, I])")
    # The same text with or without the check, so the outputs depend on the seed alone.
    meta = {
        "reference": ("float64 numpy forward of tests/gen/gen_qwen3_5_mtp.py, stored as f32; "
                      f"its decoder layer is checked against transformers' {layer_class} by --check-transformers"),
        "sequences": seqs,
        "hidden": hidden_files,
        "logits": logits_files,
        "notes": (
            f"MTP head of the text model of this folder ("
            f"{'num_nextn_predict_layers' if qwen3_next else 'mtp_num_hidden_layers'} 1, shared "
            f"embeddings and lm_head). Sequence i: row r has token sequences[i][r], incoming "
            f"hidden state row r of hidden[i] ([len, {c.H}] little-endian f32) and position r; "
            f"logits[i] is [len, {c.vocab}] little-endian f32. The hidden rows are random, not "
            f"the main model's, so the head is tested on its own. Per row: "
            f"x = mtp.fc @ [rmsnorm(embed) ; rmsnorm(hidden)] (embedding half first; norms "
            f"multiply by 1 + weight), then one gated full-attention + MoE decoder layer "
            f"(mtp.layers.0, causal over earlier rows of the same sequence, partial RoPE on "
            f"the first {c.rot} dims of each head), then lm_head @ rmsnorm(x, mtp.norm). "
            f"Experts are stored {experts}. Least gap between a row's 2nd and 3rd router "
            f"logits: {margin:.2e}. golden.json and logits_*.f32 are the unchanged text "
            f"model's, copied from {os.path.basename(os.path.normpath(src))}."),
    }
    write_meta(out, meta, say)


def write_folder(src, out, config, tensors, vocab, hidden_size, rng, forward, say):
    """The model of folder `src` with its head into folder `out`: config.json, model.safetensors
    (`tensors`), the text model's golden files copied, and per sequence of SEQUENCE_LENGTHS
    random tokens and random incoming hidden rows, the rows (mtp_hidden_<i>.f32) and the
    head's logits, forward(ids, hidden f64) -> (logits, router margin) (mtp_logits_<i>.f32).
    Returns the sequences, the hidden rows, both lists of file names and the margins."""
    seqs = [rng.integers(3, vocab, size=n).tolist() for n in SEQUENCE_LENGTHS]
    hiddens = [(HIDDEN_SCALE * rng.standard_normal((n, hidden_size))).astype(np.float32)
               for n in SEQUENCE_LENGTHS]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(dict(sorted(tensors.items())), os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(src, "golden.json")) as f:
        text_golden = json.load(f)
    for name in ["generation_config.json", "golden.json"] + text_golden["logits"]:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))

    hidden_files, logits_files, margins = [], [], []
    for i, (ids, hid) in enumerate(zip(seqs, hiddens)):
        # The stored f32 hidden rows are the input, so the reference reads them back as f32.
        logits, margin = forward(ids, hid.astype(np.float64))
        margins.append(margin)
        say(f"  seq {i} len {len(ids)}: logits max |x| {np.abs(logits).max():.3f}, "
            f"std {logits.std():.3f}; least router gap {margins[-1]:.2e}")
        hidden_files.append(f"mtp_hidden_{i}.f32")
        logits_files.append(f"mtp_logits_{i}.f32")
        hid.astype("<f4").tofile(os.path.join(out, hidden_files[-1]))
        logits.astype("<f4").tofile(os.path.join(out, logits_files[-1]))
    return seqs, hiddens, hidden_files, logits_files, margins


def write_meta(out, meta, say):
    with open(os.path.join(out, "mtp_golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(out)):
        say(f"  {name} {os.path.getsize(os.path.join(out, name))} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.join(MODELS, "qwen3_5_moe"))
    ap.add_argument("--out", default=os.path.join(MODELS, "qwen3_5_moe_mtp"))
    ap.add_argument("--check-transformers", action="store_true",
                    help="also compare the decoder layer with transformers' (needs torch)")
    args = ap.parse_args()
    write_head(args.src, args.out, args.check_transformers)


if __name__ == "__main__":
    main()
