#!/usr/bin/env python3
"""gen_modelopt_hybrid.py — a tiny hybrid as a ModelOpt NVFP4 checkpoint, and an F32 copy of
the values it holds: the Qwen3.5 (tests/golden/models/qwen3_5: Gated DeltaNet and gated
attention layers) or the Nemotron-H (nemotron_h: Mamba-2, attention without RoPE, MoE with
squared-ReLU experts). Written at test time (tests/integration/test_modelopt.py); nothing
binary is committed.

Every 2-D projection of the text model whose rows are whole 64-value blocks is quantized
(the Qwen3.5's attention q/k/v/o, DeltaNet in_proj_qkv, in_proj_z, in_proj_a, in_proj_b and
out_proj, MLP gate/up/down: all of them; the Nemotron-H's 32-wide model leaves the Mamba-2
out_proj, attention o_proj and the experts' down projections) by gen_modelopt_models's NVFP4 quantizer (quant_algo
MIXED_PRECISION, every quantized layer NVFP4 in its map, with input scales); the embedding,
LM head, norms, routers, the DeltaNet's conv1d, A_log and dt_bias, and the vision tower stay
as stored (F32), as ModelOpt's exports leave them. The values copy holds
e2m1 * e4m3 * weight_scale_2 of each quantized matrix (rounded once to f32, as both backends
compute it) and every other tensor as stored: transformers' forward over it gives the golden
log-probabilities the NVFP4 checkpoint is held to (gen_nvfp4_hybrid_golden.py), and its FP16
and BF16 costs (gen_half_reference.py).

usage: gen_modelopt_hybrid.py OUT_DIR [MODEL]   (writes OUT_DIR/MODEL_nvfp4 and OUT_DIR/MODEL_values;
MODEL qwen3_5 or nemotron_h, default qwen3_5)
"""
import json
import os
import re
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fp8_models as fp8  # noqa: E402
import gen_modelopt_models as mo  # noqa: E402

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "models")
PROJECTION = re.compile(r"^(model\.language_model|backbone)\.layers\.\d+\.(self_attn|linear_attn|mlp|mixer)\."
                        r"(\w+\.|experts\.\d+\.)?\w*proj\w*\.weight$")


def write(out_dir, model="qwen3_5"):
    """Writes the NVFP4 checkpoint and the values copy under out_dir; returns their paths."""
    source = os.path.join(MODELS, model)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    nvfp4_dir, values_dir = os.path.join(out_dir, model + "_nvfp4"), os.path.join(out_dir, model + "_values")
    stored, values, quantized = {}, {}, []
    for name, a in sorted(tensors.items()):
        a = a.astype(np.float32)
        if PROJECTION.match(name) and a.ndim == 2 and a.shape[1] % 64 == 0:
            prefix = name[:-len(".weight")]
            codes, block_scale, scale_2 = mo.nvfp4_quantize(a)
            stored[name] = ("U8", (a.shape[0], a.shape[1] // 2), mo.modelopt_pack(codes).tobytes())
            stored[prefix + ".weight_scale"] = ("F8_E4M3", block_scale.shape, block_scale.tobytes())
            stored[prefix + ".weight_scale_2"] = ("F32", [], np.float32(scale_2).astype("<f4").tobytes())
            stored[prefix + ".input_scale"] = ("F32", [], np.float32(4.0 / (6 * 448)).astype("<f4").tobytes())
            values[name] = mo.nvfp4_values(codes, block_scale, scale_2).astype(np.float32)
            quantized.append(prefix)
        else:
            stored[name] = ("F32", a.shape, a.astype("<f4").tobytes())
            values[name] = a
    assert len(quantized) >= 4 * 3, quantized  # projections of every layer
    with open(os.path.join(source, "config.json")) as f:
        cfg = json.load(f)
    # MIXED_PRECISION's map names the checkpoint's modules (model.language_model.*), which
    # sparkd reads under other names: the map is checked against the file's own.
    quant = {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
             "quantized_layers": {p: {"quant_algo": "NVFP4", "group_size": 16} for p in quantized},
             "exclude_modules": ["lm_head", "model.visual*"]}
    for d in (nvfp4_dir, values_dir):
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(source, "generation_config.json"), d)
    with open(os.path.join(nvfp4_dir, "config.json"), "w") as f:
        json.dump(dict(cfg, quantization_config={"quant_method": "modelopt", **quant}), f, indent=2)
    with open(os.path.join(nvfp4_dir, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": quant}, f, indent=2)
    shutil.copy(os.path.join(source, "config.json"), values_dir)
    fp8.write_safetensors(os.path.join(nvfp4_dir, "model.safetensors"), stored)
    fp8.write_safetensors(os.path.join(values_dir, "model.safetensors"),
                          {n: ("F32", v.shape, v.astype("<f4").tobytes()) for n, v in values.items()})
    return nvfp4_dir, values_dir


if __name__ == "__main__":
    print(write(*sys.argv[1:3]))
