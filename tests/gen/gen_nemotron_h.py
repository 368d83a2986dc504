#!/usr/bin/env python3
"""Writes a tiny random-weight NVIDIA Nemotron-3 (NemotronH) hybrid model and its golden logits.

NemotronHForCausalLM (model_type "nemotron_h") stacks blocks named by one character each of
config "hybrid_override_pattern"; every block is x + mixer(RMSNorm(x)) with exactly one mixer:
  M  Mamba-2: in_proj -> [z | x B C | dt]; depthwise causal conv1d (+bias) and SiLU over x B C;
     selective scan with dt = softplus(dt + dt_bias), A = -exp(A_log), heads grouped onto
     n_groups B/C groups, skip D * x; grouped RMSNorm(y * silu(z)) (n_groups groups); out_proj
  *  attention: GQA, no RoPE and no position input at all, scale head_dim^-0.5, no biases
  -  MLP: down_proj(relu(up_proj(x))^2), not gated
  E  MoE: sigmoid router over n_routed_experts; e_score_correction_bias is added to the scores
     only to choose the top-k; the chosen experts' unbiased scores are normalised to sum 1 and
     times routed_scaling_factor; experts are relu^2 MLPs; one shared relu^2 MLP is always added
and the model ends in RMSNorm (norm_f) and an untied lm_head. The model here (every block kind
at least twice, two Mamba blocks in a row) is "M*EMM-E*-":
  nemotron_h  NemotronHForCausalLM, f32, vocab 256, hidden 32 (not 64: the tracked tree is
              bounded, tests/integration/test_tree_size.py), Mamba 8 heads x 16 in 2 groups,
              state 16, conv 4, chunk 16; attention 4 heads / 2 KV heads x 16; MLP 64;
              MoE 8 experts top-2 of width 64, shared expert 96, routed_scaling_factor 2.5

Same layout as gen_qwen3_5.py, under tests/golden/models/nemotron_h/:
  config.json, model.safetensors, generation_config.json
  golden.json                      token sequences and, per sequence, the logits file name
  logits_<i>.f32                   [len, vocab] little-endian f32 logits of sequence i

Checkpoint layout. transformers 5.23 holds the model as "model.*" with each MoE block's experts
stacked ("mixer.experts.up_proj" [E, I, H], "mixer.experts.down_proj" [E, H, I]); its
conversion mapping for nemotron_h renames "backbone." -> "model." and merges per-expert tensors
on load, and save_pretrained reverses both. So model.safetensors is in the published hub
layout without rewriting: "backbone.embeddings.weight", "backbone.layers.<n>.norm.weight",
"backbone.layers.<n>.mixer.{in_proj.weight, conv1d.weight [C,1,K], conv1d.bias, A_log, D,
dt_bias, norm.weight, out_proj.weight}", "...mixer.{q,k,v,o}_proj.weight",
"...mixer.{up,down}_proj.weight", "...mixer.gate.weight", "...mixer.gate.e_score_correction_bias",
"...mixer.experts.<e>.{up,down}_proj.weight" (one tensor per expert),
"...mixer.shared_experts.{up,down}_proj.weight", "backbone.norm_f.weight", "lm_head.weight". The
script checks those names and reloads the file with from_pretrained (which must map every
name, or it fails) before computing any logits. The same names are in public copies of the
hub checkpoints' safetensors headers (Nemotron-3-Nano-30B-A3B and -Ultra: e.g.
"backbone.layers.1.mixer.experts.0.up_proj.weight", "backbone.layers.0.mixer.conv1d.weight"
[18432, 1, 4]) and in Megatron-Bridge's NemotronH mapping (router.expert_bias ->
"mixer.gate.e_score_correction_bias").

config.json. save_pretrained in transformers 5.23 writes "layers_block_type" (a list of
transformers-5 names) and no "hybrid_override_pattern" / "num_hidden_layers", which is not
what published checkpoints carry, so the script replaces it with a config.json in the hub
form, keys sorted as transformers writes them. Its key set follows public copies of the
Nemotron-3-Nano-30B-A3B config.json (e.g. the test configs in NVIDIA Megatron-Bridge's
NemotronH bridge tests, and a verbatim, alphabetically sorted dump of a Nano-30B-A3B-derived
config): hybrid_override_pattern, num_hidden_layers, mamba_num_heads, mamba_head_dim,
n_groups, ssm_state_size, conv_kernel, chunk_size, expand, use_conv_bias, mamba_hidden_act,
mamba_proj_bias, time_step_min/max/floor, n_routed_experts, n_shared_experts,
num_experts_per_tok, moe_intermediate_size, moe_shared_expert_intermediate_size, n_group,
topk_group, norm_topk_prob, routed_scaling_factor, mlp_hidden_act "relu2", mlp_bias,
layer_norm_epsilon and norm_eps, head_dim, num_attention_heads, num_key_value_heads,
intermediate_size, attention_bias, rope_theta and partial_rotary_factor (present in the hub
file although no NemotronH attention uses RoPE), tie_word_embeddings false. "time_step_limit":
[0.0, Infinity] is written as Python's json writes it, a bare Infinity, which strict JSON
parsers reject: published Nemotron-H configs carry exactly that (reported for
Nemotron-Nano-12B-v2-Base in ai-dynamo/dynamo#3043 and for Nemotron-3-Ultra in
ai-dynamo/aiconfigurator#1197), so a loader must accept it. No "auto_map" (the hub's points to
remote code that is not here). Values are the tiny model's, not the 30B's.

dt limits. transformers 5.23's Mamba mixer sets time_step_limit = (time_step_min, inf),
ignoring config.time_step_limit. Its multi-token path (mamba2_chunk_scan: a whole prompt, and
also the first token of a fresh cache) clamps softplus(dt + dt_bias) to at least time_step_min;
its one-token cached path (mamba2_selective_state_update) does not clamp at all, so where
softplus falls below time_step_min the two disagree (by 0.5 of max |logit| in a trial with
some dt_bias = -9). NVIDIA's remote modeling code clamps differently again: its CUDA prefill
passes config.time_step_limit ([0, inf], no clamp) to mamba_ssm, its CUDA decode does not
clamp, its torch decode clamps at time_step_min. All of these agree wherever softplus(dt +
dt_bias) >= time_step_min, so the weights keep every such value (every position of every
sequence, every Mamba head) well above it, the script fails otherwise, and golden.json records
the least value: the logits hold for an implementation with or without the clamp.

The reference is transformers in f32 on the CPU, eager attention, each sequence in one forward
without a cache (Mamba blocks run the chunked SSD scan, chunk_size 16, so the 40- and 70-token
sequences cross chunk boundaries). The script also feeds every sequence one token at a time
through the cache (recurrent Mamba update, conv state, KV cache), and as a prefill of a prefix
followed by one multi-token forward of the rest through the cache (chunked scan from a carried
state), and fails unless all agree; only the one-forward logits are stored.

Run once where torch is installed (CI has no torch, so the outputs are committed):
  python tests/gen/gen_nemotron_h.py [--out tests/golden/models]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from transformers import NemotronHConfig, NemotronHForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_qwen3_5 import recurrent_logits  # noqa: E402  one token a time through the cache

VOCAB = 256
SEQUENCE_LENGTHS = (1, 7, 40, 70)  # 40 and 70 cross the 16-token Mamba chunks
CACHED_TOLERANCE = 1e-4
PATTERN = "M*EMM-E*-"  # Mamba 0, 3, 4; attention 1, 7; MoE 2, 6; MLP 5, 8
TIME_STEP_MIN = 0.001
DT_MARGIN = 2.0  # every softplus(dt + dt_bias) must be at least DT_MARGIN * time_step_min

# config.json as the hub checkpoints spell it (see the docstring). Sorted on writing.
HUB_CONFIG = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "hybrid_override_pattern": PATTERN,
    "num_hidden_layers": len(PATTERN),
    "tie_word_embeddings": False,
    "max_position_embeddings": 256,
    "layer_norm_epsilon": 1e-05,
    "norm_eps": 1e-05,
    "residual_in_fp32": False,
    "rescale_prenorm_residual": True,
    "initializer_range": 0.02,
    "hidden_dropout": 0.0,
    "use_bias": False,
    "use_cache": True,
    "num_logits_to_keep": 1,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "dtype": "float32",
    # attention blocks
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "sliding_window": None,
    "rope_theta": 10000,
    "partial_rotary_factor": 1.0,
    # Mamba-2 blocks: inner width mamba_num_heads * mamba_head_dim = 128 ("expand" is unused)
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "chunk_size": 16,
    "expand": 2,
    "use_conv_bias": True,
    "mamba_proj_bias": False,
    "mamba_hidden_act": "silu",
    "use_mamba_kernels": True,
    "time_step_min": TIME_STEP_MIN,
    "time_step_max": 0.1,
    "time_step_floor": 0.0001,
    "time_step_limit": [0.0, math.inf],
    # dense MLP blocks. Every matrix width is a multiple of 32 (whole Q8_0 blocks, for load
    # quantization), and expert, shared-expert and hidden widths all differ, so that no
    # expert matrix is square and a transposed or swapped one fails on its shape.
    "intermediate_size": 64,
    "mlp_hidden_act": "relu2",
    "mlp_bias": False,
    # MoE blocks
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 96,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
}

# Keys of HUB_CONFIG that are file metadata rather than NemotronHConfig arguments.
NOT_CONFIG_ARGS = ("architectures", "model_type", "dtype")

# The models written: name -> (pattern, what differs from HUB_CONFIG, weight seed).
# nemotron_h_latent has Nemotron-3-Super's LatentMoE: the routed experts work in a narrower
# latent space (fc1_latent_proj before them, fc2_latent_proj after), the router and the shared
# expert on the hidden state; 16 wide, unlike every other width.
MODELS = {
    "nemotron_h": (PATTERN, {}, 5011),  # 5011: the widest router gap of seeds 5000-5015
    "nemotron_h_latent": ("M*E", {"moe_latent_size": 16}, 5011),
}


def hub_config(pattern, overrides):
    return dict(HUB_CONFIG, hybrid_override_pattern=pattern, num_hidden_layers=len(pattern), **overrides)


def make_config(hub):
    return NemotronHConfig(**{k: v for k, v in hub.items() if k not in NOT_CONFIG_ARGS})


def randomize(model, gen):
    # transformers' own init (std 0.02, D = 1, norm weights 1, zero router bias) gives
    # near-constant logits and hides whole terms of the forward pass; scaled random weights
    # make every term matter.
    def randn(shape):
        return torch.randn(shape, generator=gen)

    def rand(shape):
        return torch.rand(shape, generator=gen)

    n_heads = model.config.mamba_num_heads
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                # Block RMSNorms, norm_f and the Mamba gated group norm all multiply by the
                # weight itself (not 1 + weight).
                p.copy_(1.0 + 0.25 * randn(p.shape))
            elif name.endswith("A_log"):
                # A = exp(A_log) log-uniform in [0.05, 2]: with dt mostly 0.05..2 some heads
                # carry their state across 16-token chunks, some forget within a few tokens.
                p.copy_(math.log(0.05) + (math.log(2.0) - math.log(0.05)) * rand(p.shape))
            elif name.endswith("dt_bias"):
                # softplus(dt_bias) from 0.13 to 1.3 per head; with the dt rows of in_proj
                # scaled below, softplus(dt + dt_bias) stays far above time_step_min.
                p.copy_(-2.0 + 2.5 * rand(p.shape))
            elif name.endswith(".D"):
                p.copy_(randn(p.shape))  # skip gain of either sign, not the default 1
            elif name.endswith("conv1d.weight"):
                p.copy_(randn(p.shape) / (p.shape[-1] ** 0.5))
            elif name.endswith("conv1d.bias"):
                p.copy_(0.2 * randn(p.shape))
            elif name.endswith("mixer.in_proj.weight"):
                p.copy_(randn(p.shape) / (p.shape[-1] ** 0.5))
                p[-n_heads:] *= 0.3  # the dt rows: raw dt ~ N(0, 0.3^2)
            elif "embeddings" in name:
                p.copy_(randn(p.shape))
            else:
                # Linear weights [out, in] and stacked experts [E, out, in].
                p.copy_(randn(p.shape) / (p.shape[-1] ** 0.5))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                # Half the spread of the sigmoid scores (std ~0.2): the chosen experts differ
                # from the top-k of the unbiased scores for about half the tokens, every expert
                # is still chosen, and weighting the experts with biased scores would change
                # the output.
                b.copy_(0.1 * randn(b.shape))


def sequences(rng):
    return [rng.integers(3, VOCAB, size=n).tolist() for n in SEQUENCE_LENGTHS]




def split_logits(model, ids, k):
    # A prefill of ids[:k], then ids[k:] in one forward through the same cache: the second
    # chunked scan starts from the carried SSM state and the conv state.
    first = model(torch.tensor([ids[:k]]), use_cache=True)
    second = model(torch.tensor([ids[k:]]), past_key_values=first.past_key_values, use_cache=True)
    return torch.cat([first.logits[0], second.logits[0]]).float().numpy()


def mamba_mixers(model):
    return [m for m in model.modules() if type(m).__name__ == "NemotronHMamba2Mixer"]


def least_dt(model, ids):
    # The least softplus(dt + dt_bias) over positions, heads and Mamba blocks of one forward.
    least = []

    def hook(mixer):
        def record(module, inputs, outputs):
            dt = outputs[..., -mixer.num_heads:] + mixer.dt_bias
            least.append(F.softplus(dt).min().item())
        return record

    hooks = [m.in_proj.register_forward_hook(hook(m)) for m in mamba_mixers(model)]
    model(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return min(least)


def router_stats(model, ids):
    # The least gap, over tokens and MoE blocks, between the 2nd and 3rd selection scores
    # (sigmoid(logit) + e_score_correction_bias): how far rounding may move them before another
    # expert is chosen. Also how many (token, block) selections differ from the top-k of the
    # unbiased scores, i.e. how much the correction bias matters to the selection.
    gaps, differ, total = [], 0, 0

    def record(module, inputs, outputs):
        scores = outputs[0].sigmoid()
        choice = scores + module.e_score_correction_bias
        top = choice.topk(3, dim=-1).values
        gaps.append((top[:, 1] - top[:, 2]).min().item())
        biased = choice.topk(module.top_k, dim=-1).indices.sort(dim=-1).values
        plain = scores.topk(module.top_k, dim=-1).indices.sort(dim=-1).values
        nonlocal differ, total
        differ += int((biased != plain).any(dim=-1).sum())
        total += scores.shape[0]

    hooks = [m.register_forward_hook(record) for m in model.modules()
             if type(m).__name__ == "NemotronHTopkRouter"]
    model(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps), differ, total


def misuse_effect(model, ids, reference):
    # Relative change of the logits when the correction bias is misused: (a) left out of the
    # selection, (b) also added to the expert weights. The fixture must tell both apart.
    routers = [m for m in model.modules() if type(m).__name__ == "NemotronHTopkRouter"]
    scale = np.abs(reference).max()
    effects = {}
    for kind in ("bias_ignored", "bias_in_weights"):
        originals = [r.forward for r in routers]
        for r in routers:
            def forward(hidden_states, r=r, kind=kind):
                h = hidden_states.view(-1, r.hidden_dim)
                logits = F.linear(h.float(), r.weight.float())
                scores = logits.sigmoid()
                choice = scores if kind == "bias_ignored" else scores + r.e_score_correction_bias
                idx = torch.topk(choice, k=r.top_k, dim=-1, sorted=False)[1]
                w = (scores + r.e_score_correction_bias if kind == "bias_in_weights" else scores).gather(1, idx)
                if r.norm_topk_prob:
                    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
                return logits, w * r.routed_scaling_factor, idx
            r.forward = forward
        try:
            out = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        finally:
            for r, f in zip(routers, originals):
                r.forward = f
        effects[kind] = float(np.abs(out - reference).max() / scale)
    return effects


def check_saved(model, path):
    # The file must hold exactly the weights the reference ran with, under hub names: the
    # model's "model.*" is "backbone.*" in the file and the stacked experts are one tensor
    # per expert.
    state = model.state_dict()
    with safe_open(path, "pt") as f:
        names = list(f.keys())
        seen = set()
        for name in names:
            assert name == "lm_head.weight" or name.startswith("backbone."), name
            t = f.get_tensor(name)
            assert t.dtype == torch.float32, (name, t.dtype)
            parts = name.split(".")
            if ".mixer.experts." in name:  # backbone.layers.N.mixer.experts.E.{up,down}_proj.weight
                e = int(parts[5])
                key = "model." + ".".join(parts[1:5] + [parts[6]])
                ref = state[key][e]
            else:
                key = "model." + name[len("backbone."):] if name.startswith("backbone.") else name
                ref = state[key]
            assert torch.equal(t, ref), name
            seen.add(key)
        assert seen == set(state), sorted(set(state) ^ seen)
        for name in names:
            print(f"  {name} {list(f.get_slice(name).get_shape())}")
    return names


def write_hub_config(out, hub):
    # Python's json writes math.inf as a bare Infinity, as the hub files have it.
    text = json.dumps(dict(hub, transformers_version=transformers.__version__),
                      indent=2, sort_keys=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    for name, (pattern, overrides, seed) in MODELS.items():
        write_model(args.out, name, pattern, hub_config(pattern, overrides), seed)


def write_model(out_dir, name, pattern, hub, seed):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(hub)
    assert cfg.hybrid_override_pattern == pattern and cfg.num_hidden_layers == len(pattern)
    model = NemotronHForCausalLM(cfg).to(torch.float32)
    randomize(model, gen)
    out = os.path.join(out_dir, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    write_hub_config(out, hub)
    built = model.eval()
    built.set_attn_implementation("eager")
    # Reload from the hub-form files: proves transformers maps every tensor name and reads the
    # hub config keys (hybrid_override_pattern, ...), and that the reload is the same model.
    model = NemotronHForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.layers_block_type == cfg.layers_block_type, model.config.layers_block_type
    assert model.config.time_step_min == TIME_STEP_MIN
    built_state = built.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(v, built_state[k]), k
    print(name, type(model).__name__, model.config.layers_block_type)
    names = check_saved(model, os.path.join(out, "model.safetensors"))
    rng = np.random.default_rng(6000)
    seqs = sequences(rng)
    files, agreement, margins, dts = [], [], [], []
    selections = [0, 0]
    with torch.no_grad():
        for j, ids in enumerate(seqs):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
            before = built(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
            assert np.array_equal(before, logits), "reloaded model differs from the one saved"
            scale = np.abs(logits).max()
            stepped = recurrent_logits(model, ids)  # Mamba blocks take the one-token update
            step_err = float(np.abs(stepped - logits).max() / scale)
            row = {"length": len(ids), "stepped_max_rel_err": step_err}
            msg = f"token-by-token rel err {step_err:.2e}"
            if len(ids) > 1:
                k = min(len(ids) - 1, 21)  # 21: not a chunk multiple, so both scans have tails
                split = split_logits(model, ids, k)
                split_err = float(np.abs(split - logits).max() / scale)
                row.update(split_at=k, split_max_rel_err=split_err)
                msg += f", prefill {k} + rest rel err {split_err:.2e}"
                assert split_err < CACHED_TOLERANCE, (j, split_err)
            assert step_err < CACHED_TOLERANCE, (j, step_err)
            agreement.append(row)
            dt = least_dt(model, ids)
            dts.append(dt)
            assert dt >= DT_MARGIN * TIME_STEP_MIN, (j, dt)
            margin, differ, total = router_stats(model, ids)
            margins.append(margin)
            selections[0] += differ
            selections[1] += total
            print(f"  seq {j} len {len(ids)}: logits max |x| {scale:.3f}, std {logits.std():.3f}; {msg}; "
                  f"least softplus(dt+dt_bias) {dt:.4f}; least 2nd-3rd selection gap {margin:.2e}; "
                  f"bias changes the selection of {differ}/{total} (token, block)")
            fname = f"logits_{j}.f32"
            logits.astype("<f4").tofile(os.path.join(out, fname))
            files.append(fname)
        effects = misuse_effect(model, seqs[-1], model(torch.tensor([seqs[-1]]), use_cache=False)
                                .logits[0].float().numpy())
        print(f"  correction-bias misuse, rel change of seq {len(seqs) - 1} logits: {effects}")
        assert min(effects.values()) > 1e-2, effects
    meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                         f"f32, eager attention",
            "architecture": hub["architectures"][0],
            "vocab_size": VOCAB, "sequences": seqs, "logits": files,
            "hybrid_override_pattern": pattern,
            "cached_agreement": agreement,
            "least_softplus_dt": min(dts),
            "least_router_selection_gap": min(margins),
            "notes": (f"Logits from one forward over the whole sequence without a cache (Mamba blocks: "
                      f"chunked SSD scan, {hub['chunk_size']}-token chunks). Feeding the sequence "
                      f"one token at a time through the cache (recurrent update), and as a prefill of "
                      f"a prefix then one forward of the rest through the cache, agree within "
                      f"{CACHED_TOLERANCE} relative (cached_agreement: max |diff| / max |logit|). "
                      f"Every softplus(dt + dt_bias) is at least {min(dts):.4f}, above time_step_min "
                      f"{TIME_STEP_MIN}: transformers clamps dt at time_step_min in its multi-token scan "
                      f"only, other implementations clamp at 0 or not at all, and these logits hold "
                      f"either way. MoE: e_score_correction_bias changes the chosen experts of "
                      f"{selections[0]} of {selections[1]} (token, MoE block) pairs; leaving it out of "
                      f"the selection, or adding it to the expert weights, changes the last "
                      f"sequence's logits by {effects['bias_ignored']:.2f} and "
                      f"{effects['bias_in_weights']:.2f} of max |logit|. Least gap between a token's "
                      f"2nd and 3rd selection scores: {min(margins):.2e}. Tensors use the hub names "
                      f"('backbone.*', one tensor per expert); config.json carries "
                      f"\"time_step_limit\": [0.0, Infinity] with a bare Infinity, as hub configs do.")}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(name, [len(s) for s in seqs], f"{len(names)} tensors")


if __name__ == "__main__":
    main()
