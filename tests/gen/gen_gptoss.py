#!/usr/bin/env python3
"""Writes a tiny random gpt-oss model with MXFP4 experts, its golden logits, and the same
model as a GGUF file.

The checkpoint is laid out as OpenAI publishes gpt-oss: bf16-free f32 attention, router,
embedding and head; each layer's experts stacked and MXFP4-quantized into
mlp.experts.{gate_up,down}_proj_blocks (uint8 [E, rows, cols/32, 16], two FP4 codes a
byte, low nibble first) and _scales (E8M0 [E, rows, cols/32]), gate and up rows
interleaved. The quantizer below is written from the OCP MX spec; transformers' own MXFP4
dequantization (Mxfp4Config(dequantize=True)) reads the file back, and the script checks
that what it read is exactly the dequantized codes before it computes the logits in f32
with eager attention. The sliding window (8) is shorter than the longer sequences, and
the layer types alternate as gpt-oss's do, so sliding and full layers, the sinks and YaRN
RoPE all shape the logits.

The GGUF copy is written with the gguf package as llama.cpp's converter lays gpt-oss out
(gpt-oss arch keys, attn_sinks, post_attention_norm, stacked expert tensors and biases,
gate and up split apart); gguf's MXFP4 quantizer re-encodes the experts, and the script
checks that gguf's dequantizer gives back exactly the same weights.

With --separated it writes gpt_oss_separated instead (no GGUF): the same model with routing
that rounding the activations to BF16 cannot flip (separate() below), so the CUDA
backend's BF16 logits can be held to these f32 golden logits directly.

Run once where torch is installed (CI has no torch, so the checkpoint and golden logits are
committed):
  python tests/gen/gen_gptoss.py [--out tests/golden/models] [--separated]
The GGUF copy is not committed: write_gguf_from_checkpoint() writes it from the committed
checkpoint with numpy, safetensors and gguf alone (the build's venv), the same bytes as this
script's run, and tests/gen/golden_gguf.py calls it at test time into
build/golden/models/gpt_oss.gguf, where the tests read it. This script writes it there too
(--gguf-out), from the weights in memory, and checks that write_gguf_from_checkpoint gives
the same bytes.
"""
import argparse
import filecmp
import json
import os
import types

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file, save_file

# OCP MX E2M1 code points, code = sign << 3 | magnitude index.
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
               dtype=np.float32)
WINDOW = 8


def config():
    from transformers import GptOssConfig
    return GptOssConfig(
        vocab_size=256, hidden_size=64, intermediate_size=64, head_dim=16, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=4,
        sliding_window=WINDOW, max_position_embeddings=256, rms_norm_eps=1e-5, swiglu_limit=7.0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2)


def mxfp4_quantize(w):
    """w [..., cols] f32 -> (blocks uint8 [..., cols/32, 16], scales uint8 [..., cols/32]).
    Per block of 32: the shared exponent puts the largest magnitude in [4, 8) (E2M1's top
    binade), each value rounds to the nearest code point, ties to the lower index."""
    *prefix, cols = w.shape
    x = w.reshape(*prefix, cols // 32, 32).astype(np.float32)
    amax = np.abs(x).max(axis=-1, keepdims=True)
    exp = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127).astype(np.int32)
    scaled = x / np.ldexp(np.float32(1), exp)
    codes = np.abs(scaled[..., None] - FP4).argmin(axis=-1).astype(np.uint8)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (exp[..., 0] + 127).astype(np.uint8)


def mxfp4_dequantize(blocks, scales):
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = FP4[codes] * np.ldexp(np.float32(1), scales.astype(np.int32) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32).astype(np.float32)


def random_state(cfg, gen):
    import torch
    from transformers import GptOssForCausalLM
    model = GptOssForCausalLM(cfg).float()
    state = {}
    for name, p in model.state_dict().items():
        shape = tuple(p.shape)
        if name.endswith("norm.weight"):
            v = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith("sinks"):
            v = torch.randn(shape, generator=gen)
        elif "bias" in name:
            v = 0.2 * torch.randn(shape, generator=gen)
        elif "embed_tokens" in name:
            v = torch.randn(shape, generator=gen)
        elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            v = torch.randn(shape, generator=gen) / (shape[-2] ** 0.5)  # [E, in, out]
        else:
            v = torch.randn(shape, generator=gen) / (shape[-1] ** 0.5)
        state[name] = v.numpy().astype(np.float32)
    return state


MIN_MARGIN = 0.5  # least 4th - 5th router logit over every token of the golden sequences and every layer


def separate(state, cfg, rng):
    """As tests/gen/gen_separated_moe.py does for the Qwen3-MoE: the residual's first
    num_local_experts dimensions carry a routing code per token (the embedding's 4.0, 3.5,
    3.0 and 2.5 at four of them, 0 elsewhere: gpt-oss picks 4 experts) that no layer writes
    (those rows of every o_proj and expert down_proj, and of their biases, are 0), and each
    router reads dimension d as expert perm[d] with weight 2 beside its random weights
    scaled by 0.2. The code is then the same on any device, and a token's 4th and 5th
    router logits stay further apart (MIN_MARGIN) than BF16's rounding can move them."""
    n = cfg.num_local_experts
    emb = state["model.embed_tokens.weight"]
    emb[:, :n] = 0
    for t in range(emb.shape[0]):
        emb[t, rng.choice(n, 4, replace=False)] = [4.0, 3.5, 3.0, 2.5]
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        state[p + "self_attn.o_proj.weight"][:n] = 0
        state[p + "self_attn.o_proj.bias"][:n] = 0
        state[p + "mlp.experts.down_proj"][:, :, :n] = 0  # [E, in, out]
        state[p + "mlp.experts.down_proj_bias"][:, :n] = 0
        state[p + "post_attention_layernorm.weight"][:n] = 1.0
        router = state[p + "mlp.router.weight"]
        router *= 0.2
        router[:, :n] = 0
        router[rng.permutation(n), np.arange(n)] = 2.0
    return state


def router_margins(model, ids):
    """The least 4th - 5th router logit of the tokens of `ids`, over the layers."""
    import torch
    least = []

    def hook(module, args):
        logits = torch.nn.functional.linear(args[0].reshape(-1, module.weight.shape[1]), module.weight, module.bias)
        top = logits.topk(5, dim=-1).values
        least.append(float((top[:, 3] - top[:, 4]).min()))

    handles = [layer.mlp.router.register_forward_pre_hook(hook) for layer in model.model.layers]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in handles:
        h.remove()
    return min(least)


def write_checkpoint(out, cfg, state):
    """The published layout: experts as MXFP4 blocks/scales over [E, out_rows, in]."""
    tensors, dequant = {}, {}
    for name, v in state.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            rows_major = np.ascontiguousarray(np.swapaxes(v, 1, 2))  # [E, out, in]
            blocks, scales = mxfp4_quantize(rows_major)
            tensors[name + "_blocks"] = blocks
            tensors[name + "_scales"] = scales
            dequant[name] = np.swapaxes(mxfp4_dequantize(blocks, scales), 1, 2)  # back to [E, in, out]
        else:
            tensors[name] = v
            dequant[name] = v
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    d["architectures"] = ["GptOssForCausalLM"]
    d["dtype"] = "float32"
    d["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    return dequant


def write_gguf(path, cfg, w):
    """As llama.cpp's converter stores gpt-oss: gate/up split, experts MXFP4."""
    wr = gguf.GGUFWriter(path, "gpt-oss")
    rp = cfg.rope_parameters
    wr.add_block_count(cfg.num_hidden_layers)
    wr.add_context_length(cfg.max_position_embeddings)
    wr.add_embedding_length(cfg.hidden_size)
    wr.add_feed_forward_length(cfg.intermediate_size)
    wr.add_head_count(cfg.num_attention_heads)
    wr.add_head_count_kv(cfg.num_key_value_heads)
    wr.add_key_length(cfg.head_dim)
    wr.add_value_length(cfg.head_dim)
    wr.add_rope_freq_base(rp["rope_theta"])
    wr.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    wr.add_expert_count(cfg.num_local_experts)
    wr.add_expert_used_count(cfg.num_experts_per_tok)
    wr.add_expert_feed_forward_length(cfg.intermediate_size)
    wr.add_sliding_window(cfg.sliding_window)
    wr.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    wr.add_rope_scaling_factor(rp["factor"])
    wr.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    wr.add_file_type(38)  # MOSTLY_MXFP4_MOE
    tokens = ["<unk>", "<s>", "</s>", "<|return|>"] + [f"t{i}" for i in range(cfg.vocab_size - 4)]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("gpt-4o")
    wr.add_token_list(tokens)
    wr.add_token_types([3, 3, 3, 3] + [1] * (len(tokens) - 4))
    wr.add_token_merges(["t 1"])
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)

    def mxfp4(name, a):  # a [E, rows, cols]
        q = gguf.quants.quantize(np.ascontiguousarray(a, dtype=np.float32), Q.MXFP4)
        back = gguf.quants.dequantize(q, Q.MXFP4)
        assert np.array_equal(back, a), f"gguf's MXFP4 does not reproduce {name}"
        wr.add_tensor(name, q, raw_shape=q.shape, raw_dtype=Q.MXFP4)

    wr.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        wr.add_tensor(b + "attn_norm.weight", w[p + "input_layernorm.weight"])
        wr.add_tensor(b + "post_attention_norm.weight", w[p + "post_attention_layernorm.weight"])
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            wr.add_tensor(b + gg + ".weight", w[p + f"self_attn.{hf}.weight"])
            wr.add_tensor(b + gg + ".bias", w[p + f"self_attn.{hf}.bias"])
        wr.add_tensor(b + "attn_sinks.weight", w[p + "self_attn.sinks"])
        wr.add_tensor(b + "ffn_gate_inp.weight", w[p + "mlp.router.weight"])
        wr.add_tensor(b + "ffn_gate_inp.bias", w[p + "mlp.router.bias"])
        gate_up = np.swapaxes(w[p + "mlp.experts.gate_up_proj"], 1, 2)  # [E, 2I, H]
        gate_up_bias = w[p + "mlp.experts.gate_up_proj_bias"]
        mxfp4(b + "ffn_gate_exps.weight", gate_up[:, 0::2])
        mxfp4(b + "ffn_up_exps.weight", gate_up[:, 1::2])
        mxfp4(b + "ffn_down_exps.weight", np.swapaxes(w[p + "mlp.experts.down_proj"], 1, 2))
        wr.add_tensor(b + "ffn_gate_exps.bias", np.ascontiguousarray(gate_up_bias[:, 0::2]))
        wr.add_tensor(b + "ffn_up_exps.bias", np.ascontiguousarray(gate_up_bias[:, 1::2]))
        wr.add_tensor(b + "ffn_down_exps.bias", w[p + "mlp.experts.down_proj_bias"])
    wr.add_tensor("output_norm.weight", w["model.norm.weight"])
    wr.add_tensor("output.weight", w["lm_head.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def write_gguf_from_checkpoint(src, path):
    """write_gguf from the checkpoint folder `src` (write_checkpoint's output) alone: its
    config.json, and its tensors with the MXFP4 experts dequantized as write_checkpoint
    returns them; numpy, safetensors and gguf only (no torch)."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = types.SimpleNamespace(**json.load(f))
    stored = load_file(os.path.join(src, "model.safetensors"))
    w = {}
    for name, v in stored.items():
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            w[base] = np.swapaxes(mxfp4_dequantize(v, stored[base + "_scales"]), 1, 2)  # [E, in, out]
        elif not name.endswith("_scales"):
            w[name] = v
    write_gguf(path, cfg, w)


def main():
    import torch
    import transformers
    from transformers import GptOssForCausalLM, Mxfp4Config
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    ap.add_argument("--separated", action="store_true", help="write gpt_oss_separated (see separate())")
    build_models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "golden", "models")
    ap.add_argument("--gguf-out", default=build_models,
                    help="where gpt_oss.gguf goes (not committed: tests/gen/golden_gguf.py)")
    args = ap.parse_args()
    out = os.path.join(args.out, "gpt_oss_separated" if args.separated else "gpt_oss")
    os.makedirs(out, exist_ok=True)
    cfg = config()
    gen = torch.Generator().manual_seed(2200)
    state = random_state(cfg, gen)
    if args.separated:
        state = separate(state, cfg, np.random.default_rng(2202))
    dequant = write_checkpoint(out, cfg, state)

    model = GptOssForCausalLM.from_pretrained(out, quantization_config=Mxfp4Config(dequantize=True),
                                              dtype=torch.float32, attn_implementation="eager").float().eval()
    got = model.state_dict()
    for name, v in dequant.items():
        assert np.array_equal(got[name].numpy(), v), f"transformers read {name} back differently"

    rng = np.random.default_rng(2201)
    seqs = [rng.integers(4, cfg.vocab_size, size=n).tolist() for n in (1, 7, 23, 40)]
    if args.separated:
        margin = min(router_margins(model, ids) for ids in seqs)
        assert margin >= MIN_MARGIN, f"4th - 5th router logit {margin} < {MIN_MARGIN}"
        print(f"least 4th - 5th router logit: {margin:.3f}")
    files = []
    with torch.no_grad():
        for j, ids in enumerate(seqs):
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            files.append(f"logits_{j}.f32")
            logits.astype("<f4").tofile(os.path.join(out, files[-1]))
    meta = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager "
                         "attention, MXFP4 experts dequantized by transformers",
            "architecture": "GptOssForCausalLM", "vocab_size": cfg.vocab_size, "sequences": seqs, "logits": files}
    if args.separated:
        meta["reference"] += f"; routing separated (least 4th - 5th router logit {margin:.3f})"
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if not args.separated:
        os.makedirs(args.gguf_out, exist_ok=True)
        path = os.path.join(args.gguf_out, "gpt_oss.gguf")
        write_gguf(path, cfg, {k: v for k, v in dequant.items()})
        again = path + ".from_checkpoint"
        write_gguf_from_checkpoint(out, again)
        assert filecmp.cmp(path, again, shallow=False), "write_gguf_from_checkpoint writes other bytes"
        os.remove(again)
    print(os.path.basename(out), [len(s) for s in seqs])


if __name__ == "__main__":
    main()
