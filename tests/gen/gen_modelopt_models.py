#!/usr/bin/env python3
"""gen_modelopt_models.py — tiny NVIDIA ModelOpt checkpoints (Hugging Face folders) and a
llama.cpp GGUF of type NVFP4, with float64 reference weights for numpy_llama's forward pass.
Written at test time (tests/integration/test_modelopt.py) into a temporary folder; nothing
binary is committed.

Layouts (write(kind, out_dir)):
  llama_nvfp4        Llama, quant_algo NVFP4 (W4A4): every linear of the layers NVFP4 with
                     its input_scale; lm_head excluded (BF16).
  llama_w4a16        Llama, quant_algo W4A16_NVFP4: NVFP4 weights, no input_scale.
  llama_fp8          Llama, quant_algo FP8: per-tensor e4m3 weights, F32 scalar scales.
  qwen3_moe_mixed    Qwen3-MoE, quant_algo MIXED_PRECISION: experts W4A16_NVFP4, attention
                     FP8, the router, layer 1's dense MLP (mlp_only_layers) and lm_head BF16.
  qwen3_moe_nvfp4    Qwen3-MoE, quant_algo NVFP4: experts, attention and the dense MLP NVFP4;
                     router and lm_head BF16.
  llama_nvfp4.gguf   llama_nvfp4's weights as llama.cpp stores NVFP4 (type 40): 64-value
                     blocks of 36 bytes, the per-tensor scale in a `.scale` sidecar (F32 [1])
                     and the input scale in `.input_scale`; written by the repo's Llama GGUF
                     writer (gen_loader_golden.write_gguf_model: names, metadata, Q/K rows).

ModelOpt NVFP4 linear X: X.weight U8 [out, in/2] (E2M1 codes, element 2k in the low nibble of
byte k, 2k+1 in the high nibble), X.weight_scale F8_E4M3 [out, in/16] (one per 16 values of a
row), X.weight_scale_2 F32 [] and, for W4A4, X.input_scale F32 []. Value = e2m1(code) *
e4m3(weight_scale) * weight_scale_2. The quantizer is written here: weight_scale_2 =
amax|w| / (6 * 448); per 16 values, block scale = e4m3(amax_block / 6 / weight_scale_2);
codes = nearest E2M1 (ties to the even code) of w / (block scale * weight_scale_2).
ModelOpt FP8 linear X: X.weight F8_E4M3 [out, in], X.weight_scale F32 [] (amax / 448),
X.input_scale F32 []; value = e4m3 * weight_scale.

The GGUF blocks are packed from the same codes and scale bytes by a separate routine and
checked against the `gguf` package's own NVFP4 decoder; the GGUF's reference weights are
that decoder's values times the `.scale` sidecar.

Hostile variants (keyword arguments of write; each names what it breaks):
  nan_scale=PREFIX        one byte of PREFIX.weight_scale set to 0x7F (an e4m3 NaN)
  scale_shape=PREFIX      PREFIX.weight_scale stored [out, in/32]
  extra_layer=PREFIX      MIXED_PRECISION's quantized_layers also lists PREFIX (no tensors)
  quant_algo=NAME         the config's quant_algo replaced by NAME
  input_scale_zero=PREFIX PREFIX.input_scale = 0
  scale2_shape=[1]        weight_scale_2 written [1] instead of [] (not hostile: a variant)
  gguf_scale_nan=NAME     (GGUF) the sidecar NAME (e.g. blk.0.attn_q.scale) holds NaN

usage: gen_modelopt_models.py OUT_DIR   (writes every layout into OUT_DIR/<kind>)
"""
import copy
import json
import os
import sys
import types

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fp8_models as fp8  # noqa: E402
import gen_loader_golden  # noqa: E402
import numpy_llama  # noqa: E402
from gen_loader_golden import GGUF_NAMES, model_tensors, write_gguf_model  # noqa: E402
from gen_q4_k_m_models import LLAMA3_ROPE, unpermute  # noqa: E402

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
E4M3_MAX, E2M1_MAX = 448.0, 6.0
GROUP = 16

LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=256, hidden_size=128,
             intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
             tie_word_embeddings=False, hidden_act="silu", torch_dtype="bfloat16",
             # Llama 3 scaling with the released models' original context: the GGUF keeps it
             # only as per-frequency divisors, which sparkd recognises for 8192.
             rope_parameters=LLAMA3_ROPE)
QWEN3_MOE = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=256, hidden_size=128,
                 intermediate_size=256, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                 rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, hidden_act="silu",
                 torch_dtype="bfloat16", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})

# kind -> (architecture, quant_algo)
LAYOUTS = {"llama_nvfp4": ("llama", "NVFP4"), "llama_w4a16": ("llama", "W4A16_NVFP4"),
           "llama_fp8": ("llama", "FP8"), "qwen3_moe_mixed": ("qwen3moe", "MIXED_PRECISION"),
           "qwen3_moe_nvfp4": ("qwen3moe", "NVFP4"), "llama_nvfp4.gguf": ("llama", "NVFP4")}
KINDS = list(LAYOUTS)
# Qwen3-MoE's seed leaves every token's 2nd and 3rd router logits at least 0.01 apart in both
# MoE layouts, so no backend's rounding of the activations tips an expert choice.
SEEDS = {"llama": 401, "qwen3moe": 410}


# ---- quantizers ----------------------------------------------------------------------------
def e2m1_encode(x):
    """Nearest E2M1 code (sign bit 3) of each value, ties to the even code, saturating at 6."""
    mags = E2M1[:8]
    a = np.minimum(np.abs(x), E2M1_MAX)
    hi = np.clip(np.searchsorted(mags, a), 0, 7)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - mags[lo], mags[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(x < 0, 8, 0)).astype(np.uint8)


def nvfp4_quantize(w):
    """w [out, in] -> (codes [out, in] uint8 0..15, e4m3 scale bytes [out, in/16], weight_scale_2)."""
    out, k = w.shape
    assert k % GROUP == 0, w.shape
    scale_2 = np.float32(np.abs(w).max() / (E2M1_MAX * E4M3_MAX))
    blocks = w.reshape(out, k // GROUP, GROUP).astype(np.float64)
    block_scale = fp8.e4m3_encode(np.abs(blocks).max(axis=-1) / E2M1_MAX / np.float64(scale_2))
    step = fp8.E4M3[block_scale][..., None] * np.float64(scale_2)
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = e2m1_encode(np.where(step > 0, blocks / step, 0.0))
    return codes.reshape(out, k), block_scale, scale_2


def nvfp4_values(codes, block_scale, scale_2):
    """The float64 weights of (codes, e4m3 block scales, weight_scale_2)."""
    out, k = codes.shape
    v = E2M1[codes].reshape(out, k // GROUP, GROUP) * fp8.E4M3[block_scale][..., None]
    return v.reshape(out, k) * np.float64(scale_2)


def modelopt_pack(codes):
    """ModelOpt's U8 [out, in/2]: element 2k in the low nibble of byte k, 2k + 1 in the high."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def modelopt_unpack(packed):
    out = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2], out[:, 1::2] = packed & 15, packed >> 4
    return out


def gguf_pack(codes, block_scale):
    """llama.cpp's NVFP4 blocks [out, in/64 * 36]: per 64 values, the 4 sub-blocks' scale bytes
    (e4m3, sign cleared), then 4 x 8 bytes: in sub-block s, byte j holds element j in its low
    nibble and element j + 8 in its high nibble."""
    out, k = codes.shape
    c = codes.reshape(out, k // 64, 4, 16)
    qs = (c[..., :8] | (c[..., 8:] << 4)).astype(np.uint8).reshape(out, k // 64, 32)
    d = (block_scale.reshape(out, k // 64, 4) & 0x7F).astype(np.uint8)
    return np.concatenate([d, qs], axis=-1).reshape(out, k // 64 * 36)


def fp8_quantize(w):
    """Per-tensor e4m3: (bytes [out, in], weight_scale)."""
    scale = np.float32(np.abs(w).max() / E4M3_MAX)
    return fp8.e4m3_encode(w / np.float64(scale)), scale


# ---- the models ----------------------------------------------------------------------------
def config(arch):
    return copy.deepcopy(LLAMA if arch == "llama" else QWEN3_MOE)


def weights(arch):
    """(config namespace, f32 weights) of the architecture: model_tensors' draws with the tiny
    fixtures' gain (gen_fp8_models) on the linear weights; Qwen3-MoE's mlp_only_layers get a
    dense MLP drawn after the rest."""
    cfg = config(arch)
    c = types.SimpleNamespace(**cfg)
    rng = np.random.default_rng(SEEDS[arch])
    tensors, _ = model_tensors(c, arch, rng)
    if arch == "qwen3moe":
        for layer in c.mlp_only_layers:
            p = f"model.layers.{layer}.mlp."
            for name in [n for n in tensors if n.startswith(p)]:
                del tensors[name]
            for proj, shape in (("gate_proj", (c.intermediate_size, c.hidden_size)),
                                ("up_proj", (c.intermediate_size, c.hidden_size)),
                                ("down_proj", (c.hidden_size, c.intermediate_size))):
                tensors[p + proj + ".weight"] = (rng.standard_normal(shape) * 0.1).astype(np.float16)
    out = {}
    for name, a in tensors.items():
        a = a.astype(np.float32)
        if a.ndim == 2 and name not in ("model.embed_tokens.weight", "lm_head.weight"):
            a = a * np.float32(np.sqrt(64 / a.shape[1]))
        out[name] = a
    return c, out


def is_linear(name, a):
    return (a.ndim == 2 and name.endswith(".weight") and name.startswith("model.layers.")
            and not name.endswith(".mlp.gate.weight"))


def plan(kind, tensors):
    """Linear prefix -> its quant_algo, for every quantized linear of the layout."""
    _, algo = LAYOUTS[kind]
    out = {}
    for name, a in tensors.items():
        if not is_linear(name, a):
            continue
        prefix = name[:-len(".weight")]
        if algo == "MIXED_PRECISION":
            if ".mlp.experts." in prefix:
                out[prefix] = "W4A16_NVFP4"
            elif ".self_attn." in prefix:
                out[prefix] = "FP8"
        else:
            out[prefix] = algo
    return out


def input_scale(algo, rng):
    """A calibration's input scale: amax of a guessed activation / the format's maximum."""
    amax = 4.0 * (1 + 0.25 * rng.random())
    return np.float32(amax / (E2M1_MAX * E4M3_MAX if algo == "NVFP4" else E4M3_MAX))


def quant_config(kind, tensors, quantized, hostile):
    _, algo = LAYOUTS[kind]
    qc = {"quant_method": "modelopt", "quant_algo": hostile.get("quant_algo", algo), "kv_cache_quant_algo": None}
    if algo != "FP8":
        qc["group_size"] = GROUP
    # Every module left in BF16 that a quantizer would otherwise have wrapped: the LM head, the
    # routers, and (mixed) the dense MLP.
    excluded = ["lm_head"] + sorted(n[:-len(".weight")] for n, a in tensors.items()
                                    if (is_linear(n, a) or n.endswith(".mlp.gate.weight"))
                                    and n[:-len(".weight")] not in quantized)
    qc["exclude_modules"] = excluded
    if algo == "MIXED_PRECISION":
        layers = {p: ({"quant_algo": a} if a == "FP8" else {"quant_algo": a, "group_size": GROUP})
                  for p, a in sorted(quantized.items())}
        if "extra_layer" in hostile:
            layers[hostile["extra_layer"]] = {"quant_algo": "FP8"}
        qc["quantized_layers"] = layers
    return qc


def write(kind, out_dir, **hostile):
    """Writes layout `kind` into out_dir (a model folder; for llama_nvfp4.gguf, the file
    out_dir/llama_nvfp4.gguf): returns (config namespace, float64 reference weights)."""
    if kind.endswith(".gguf"):
        return write_gguf(kind, out_dir, **hostile)
    arch, _ = LAYOUTS[kind]
    c, tensors = weights(arch)
    quantized = plan(kind, tensors)
    stored, ref = {}, {}
    irng = np.random.default_rng(SEEDS[arch] + 1000)
    for name, a in tensors.items():
        prefix = name[:-len(".weight")]
        algo = quantized.get(prefix) if name.endswith(".weight") else None
        if algo in ("NVFP4", "W4A16_NVFP4"):
            codes, bscale, s2 = nvfp4_quantize(a)
            ref[name] = nvfp4_values(codes, bscale, s2)
            stored[name] = ("U8", (a.shape[0], a.shape[1] // 2), modelopt_pack(codes).tobytes())
            if hostile.get("nan_scale") == prefix:
                bscale = bscale.copy()
                bscale[a.shape[0] // 2, 1] = 0x7F
            if hostile.get("scale_shape") == prefix:
                bscale = np.ascontiguousarray(bscale[:, :a.shape[1] // 32])
            stored[prefix + ".weight_scale"] = ("F8_E4M3", bscale.shape, bscale.tobytes())
            stored[prefix + ".weight_scale_2"] = ("F32", hostile.get("scale2_shape", []),
                                                  np.float32(s2).astype("<f4").tobytes())
            if algo == "NVFP4":
                s = input_scale(algo, irng) if hostile.get("input_scale_zero") != prefix else np.float32(0)
                stored[prefix + ".input_scale"] = ("F32", [], np.float32(s).astype("<f4").tobytes())
        elif algo == "FP8":
            q, s = fp8_quantize(a)
            ref[name] = fp8.E4M3[q] * np.float64(s)
            stored[name] = ("F8_E4M3", q.shape, q.tobytes())
            stored[prefix + ".weight_scale"] = ("F32", [], np.float32(s).astype("<f4").tobytes())
            s = input_scale(algo, irng) if hostile.get("input_scale_zero") != prefix else np.float32(0)
            stored[prefix + ".input_scale"] = ("F32", [], np.float32(s).astype("<f4").tobytes())
        else:
            bits = fp8.to_bf16(a)
            stored[name] = ("BF16", a.shape, bits.astype("<u2").tobytes())
            ref[name] = fp8.bf16_values(bits)
    cfg = config(arch)
    qc = quant_config(kind, tensors, quantized, hostile)
    cfg["quantization_config"] = qc
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt", "version": "0.37.0"},
                   "quantization": {k: v for k, v in qc.items() if k != "quant_method"}}, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id}, f)
    fp8.write_safetensors(os.path.join(out_dir, "model.safetensors"), stored)
    return c, ref


# ---- GGUF ----------------------------------------------------------------------------------
class _SidecarWriter(gguf.GGUFWriter):
    """A GGUFWriter that follows each NVFP4 tensor with its `.scale` (weight_scale_2) and
    `.input_scale` sidecars, taken from `pending` (set by the quantizer just before)."""
    pending = None
    scale_nan = None

    def add_tensor(self, name, tensor, raw_shape=None, raw_dtype=None, **kw):
        super().add_tensor(name, tensor, raw_shape=raw_shape, raw_dtype=raw_dtype, **kw)
        if raw_dtype == Q.NVFP4:
            s2, s_in = _SidecarWriter.pending
            _SidecarWriter.pending = None
            base = name[:-len(".weight")]
            if _SidecarWriter.scale_nan == base + ".scale":
                s2 = np.float32(np.nan)
            super().add_tensor(base + ".scale", np.array([s2], dtype=np.float32))
            super().add_tensor(base + ".input_scale", np.array([s_in], dtype=np.float32))


def read_gguf(path, c):
    """Float64 Hugging Face weights of a Llama GGUF as the gguf package decodes it: NVFP4
    blocks times their `.scale` sidecar, Q/K rows put back in Hugging Face order."""
    hf_of = {v: k for k, v in GGUF_NAMES.items()}
    reader = gguf.GGUFReader(path)
    side = {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors
            if t.name.endswith(".scale") or t.name.endswith(".input_scale")}
    w = {}
    for t in reader.tensors:
        if t.name in side or t.name == "rope_freqs.weight":
            continue
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        a = a.reshape([int(d) for d in reversed(t.shape)])
        if t.tensor_type == Q.NVFP4:
            scale = side[t.name[:-len(".weight")] + ".scale"]
            assert scale.shape == (1,), (t.name, scale.shape)
            a = a * scale[0]
        if t.name == "token_embd.weight":
            w["model.embed_tokens.weight"] = a
        elif t.name == "output_norm.weight":
            w["model.norm.weight"] = a
        elif t.name == "output.weight":
            w["lm_head.weight"] = a
        else:
            _, layer, kind, suffix = t.name.split(".")
            rest = hf_of[kind]
            if rest == "self_attn.q_proj":
                a = unpermute(a, c.num_attention_heads)
            elif rest == "self_attn.k_proj":
                a = unpermute(a, c.num_key_value_heads)
            w[f"model.layers.{layer}.{rest}.{suffix}"] = a
    return w


def write_gguf(kind, out_dir, gguf_scale_nan=None):
    """llama_nvfp4's weights as llama.cpp's NVFP4 GGUF (every matrix of the layers NVFP4, the
    embeddings, norms and output F32 holding llama_nvfp4's BF16 values)."""
    arch, _ = LAYOUTS[kind]
    c, tensors = weights(arch)
    irng = np.random.default_rng(SEEDS[arch] + 1000)
    plain = {}
    for name, a in tensors.items():
        if name.endswith(".weight") and is_linear(name, a):
            plain[name] = a
        else:
            plain[name] = fp8.bf16_values(fp8.to_bf16(a)).astype(np.float32)
    expected = {}

    def quantize(a, qt):
        assert qt == Q.NVFP4
        codes, bscale, s2 = nvfp4_quantize(a)
        packed = gguf_pack(codes, bscale)
        # The packing against gguf's own decoder: its blocks times weight_scale_2 are the
        # ModelOpt values of the same codes.
        want = nvfp4_values(codes, bscale, s2)
        got = gguf.quants.dequantize(packed, Q.NVFP4).astype(np.float64).reshape(a.shape) * np.float64(s2)
        assert np.array_equal(got, want), np.abs(got - want).max()
        assert np.array_equal(modelopt_unpack(modelopt_pack(codes)), codes)
        expected[len(expected)] = want
        _SidecarWriter.pending = (s2, input_scale("NVFP4", irng))
        return packed

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, kind)
    real = gen_loader_golden.gguf
    gen_loader_golden.gguf = types.SimpleNamespace(**{**vars(real), "GGUFWriter": _SidecarWriter})
    _SidecarWriter.scale_nan = gguf_scale_nan
    try:
        write_gguf_model(path, "llama", c, c.head_dim, plain,
                         qtype=lambda n: Q.NVFP4 if n.startswith("blk.") else None,
                         quantize=quantize, file_type=gguf.LlamaFileType.MOSTLY_NVFP4)
    finally:
        gen_loader_golden.gguf = real
        _SidecarWriter.scale_nan = None
    if gguf_scale_nan:
        return c, None
    ref = read_gguf(path, c)
    types_in_file = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert sum(t == Q.NVFP4 for t in types_in_file.values()) == 7 * c.num_hidden_layers, types_in_file
    return c, ref


def write_values(c, w, out_dir):
    """An unquantized F32 folder of reference weights w (config without quantization_config):
    what a layout computes, in a form sparkd reads without ModelOpt support (for debugging)."""
    cfg = {k: v for k, v in vars(c).items() if k != "quantization_config"}
    cfg["torch_dtype"] = "float32"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    fp8.write_safetensors(os.path.join(out_dir, "model.safetensors"),
                          {n: ("F32", a.shape, np.ascontiguousarray(a, dtype="<f4").tobytes()) for n, a in w.items()})


def sequences(c, seed=7):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, c.vocab_size, n)] for n in (1, 7, 23, 40)]


def self_check():
    """The quantizers against their tables and each other (no sparkd involved)."""
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(e2m1_encode(E2M1[codes])[codes != 8], codes[codes != 8])
    finite = ~np.isnan(fp8.E4M3)
    c8 = np.arange(256)[finite & (np.arange(256) != 0x80)]
    assert np.array_equal(fp8.e4m3_encode(fp8.E4M3[c8]), c8.astype(np.uint8))
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 128)) * np.exp(rng.standard_normal((8, 1)))).astype(np.float32)
    w[3, 16:32] = 0  # an all-zero block
    codes, bscale, s2 = nvfp4_quantize(w)
    v = nvfp4_values(codes, bscale, s2)
    assert np.all(v[3, 16:32] == 0)
    # Every value within half a step of its block's grid (steps of at most 2 * scale units).
    step = fp8.E4M3[bscale].repeat(GROUP, axis=1) * s2
    assert np.all(np.abs(v - w) <= step + 1e-12), np.abs(v - w).max()
    g = gguf.quants.dequantize(gguf_pack(codes, bscale), Q.NVFP4).astype(np.float64).reshape(w.shape) * s2
    assert np.array_equal(g, v)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "modelopt_models"
    numpy_llama.check_against_transformers()
    self_check()
    for kind in KINDS:
        d = out if kind.endswith(".gguf") else os.path.join(out, kind)
        write(kind, d)
        print("wrote", os.path.join(out, kind))


if __name__ == "__main__":
    main()
