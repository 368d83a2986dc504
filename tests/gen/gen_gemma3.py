#!/usr/bin/env python3
"""Writes a tiny random-weight Gemma 3 text model (Gemma3ForCausalLM) and its golden logits.

Gemma 3's decoder: the embedding scaled by sqrt(hidden_size); four RMSNorms a layer with
weights used as (1 + w), in "sandwich" placement (the attention's and the MLP's outputs
are normed too before they join the residual); q and k normed per head before RoPE;
queries scaled by query_pre_attn_scalar^-0.5 (24 here, not head_dim 16); sliding-window
layers (window 8, shorter than the longer sequences) with their own RoPE base and no
scaling, full-attention layers with rope_theta and linear scaling (factor 2); a GELU-tanh
gated MLP; the final norm and the tied LM head.

Same layout as gen_gptoss.py, under tests/golden/models/gemma3/:
  config.json, generation_config.json, model.safetensors (BF16 weights)
  golden.json      token sequences and, per sequence, the logits file name
  logits_<i>.f32   [len, vocab] little-endian f32 logits of sequence i
  softcap.json     the same model with final_logit_softcapping = SOFTCAP (Gemma 2's and
                   Gemma 4's logit cap; Gemma 3 configs have null): its sequence and logits
                   file (softcap_0.f32), so that the weights are stored once

and the same files under tests/golden/models/gemma3_gguf/ for a model that llama.cpp's gemma3
GGUF layout can describe (tests/gen/gguf_gemma3.py writes it so at test time): its loader
reads no layer types and no query scale, so this one has 6 layers of which every 6th is full
(layer 5), and queries scaled by head_dim^-0.5 (llama.cpp's rule for every size but the 27B's).

The reference is transformers in f32 on the CPU (the BF16 weights read back and widened),
eager attention, each sequence in one forward without a cache. The script also checks the
config transformers writes says what the model computed with (layer types, RoPE per layer
type) and that a token-by-token pass through the cache gives the same logits.

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_gemma3.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

VOCAB = 128
WINDOW = 8
SOFTCAP = 15.0
SEQUENCE_LENGTHS = (1, 7, 23, 40)  # the shapes tests/unit/test_cpu_forward.cpp's kModels expect
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100000.0}}


GGUF_LAYER_TYPES = ["sliding_attention"] * 5 + ["full_attention"]


def config(softcap=None, layer_types=LAYER_TYPES, query_pre_attn_scalar=24):
    return Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=query_pre_attn_scalar,
        sliding_window=WINDOW, layer_types=layer_types, rope_parameters=json.loads(json.dumps(ROPE)),
        max_position_embeddings=256,
        rms_norm_eps=1e-6, final_logit_softcapping=softcap, attn_logit_softcapping=None,
        tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)


def random_state(model, gen):
    state = {}
    for name, p in model.state_dict().items():
        shape = tuple(p.shape)
        if name.endswith("norm.weight"):
            v = 0.3 * torch.randn(shape, generator=gen)  # used as 1 + w
        elif "embed_tokens" in name:
            v = torch.randn(shape, generator=gen) * 0.5
        else:
            v = torch.randn(shape, generator=gen) / (shape[-1] ** 0.5)
        state[name] = v.to(torch.bfloat16)
    return state


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def stepwise(model, ids):
    """Token by token through transformers' cache: each row's logits."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    rows = []
    with torch.no_grad():
        for i, t in enumerate(ids):
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True,
                        position_ids=torch.tensor([[i]]))
            rows.append(out.logits[0, -1].float())
    return torch.stack(rows)


def write_model(out, cfg, seed):
    """Random BF16 weights for `cfg` (seed), saved in `out` with the config, read back by
    transformers and checked; its golden logits of four sequences. Returns the model (f32),
    the sequences and the reference's description."""
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg)
    state = random_state(model, torch.Generator().manual_seed(seed))
    # Tied: the checkpoint holds the embedding only.
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    d["architectures"] = ["Gemma3ForCausalLM"]
    d["dtype"] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0}, f)

    model = Gemma3ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    got = model.state_dict()
    for name, v in state.items():
        if name != "lm_head.weight":
            assert torch.equal(got[name], v.float()), f"transformers read {name} back differently"
    assert torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"]), "the head is not tied"
    assert model.config.layer_types == cfg.layer_types
    rp = model.config.rope_parameters
    assert rp["full_attention"]["rope_type"] == "linear" and rp["full_attention"]["factor"] == 2.0, rp
    assert rp["sliding_attention"]["rope_theta"] == 10000.0 and rp["full_attention"]["rope_theta"] == 100000.0, rp
    assert model.config.sliding_window == WINDOW

    rng = np.random.default_rng(seed + 1)
    seqs = [rng.integers(3, VOCAB, size=n).tolist() for n in SEQUENCE_LENGTHS]
    files = []
    for j, ids in enumerate(seqs):
        logits = logits_of(model, ids)
        step = stepwise(model, ids)
        assert torch.allclose(logits, step, atol=1e-4, rtol=0), f"cached pass differs on sequence {j}"
        files.append(f"logits_{j}.f32")
        logits.numpy().astype("<f4").tofile(os.path.join(out, files[-1]))
    reference = f"transformers {transformers.__version__}, torch {torch.__version__}, f32 from BF16 weights, eager attention"
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference, "architecture": "Gemma3ForCausalLM", "vocab_size": VOCAB,
                   "sequences": seqs, "logits": files}, f, indent=1)
    return model, seqs, reference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    out = os.path.join(args.out, "gemma3")
    model, seqs, reference = write_model(out, config(), 3300)

    # The same weights with the final logits capped at SOFTCAP.
    capped = Gemma3ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                               final_logit_softcapping=SOFTCAP).eval()
    assert capped.config.final_logit_softcapping == SOFTCAP
    ids = seqs[3]
    logits = logits_of(capped, ids)
    plain = logits_of(model, ids)
    assert float(plain.abs().max()) > SOFTCAP, "the cap would change nothing"
    assert torch.allclose(logits, torch.tanh(plain / SOFTCAP) * SOFTCAP, atol=1e-5)
    logits.numpy().astype("<f4").tofile(os.path.join(out, "softcap_0.f32"))
    with open(os.path.join(out, "softcap.json"), "w") as f:
        json.dump({"reference": reference, "final_logit_softcapping": SOFTCAP, "vocab_size": VOCAB,
                   "sequences": [ids], "logits": ["softcap_0.f32"]}, f, indent=1)
    print("gemma3", [len(s) for s in seqs], "max |logit|", float(plain.abs().max()))

    _, seqs, _ = write_model(os.path.join(args.out, "gemma3_gguf"),
                             config(layer_types=GGUF_LAYER_TYPES, query_pre_attn_scalar=16), 3400)
    print("gemma3_gguf", [len(s) for s in seqs])


if __name__ == "__main__":
    main()
