"""Hostile Qwen3.5 hybrid folders: a conv kernel, A_log or stacked-expert tensor of the wrong
shape, a DeltaNet head count that disagrees with the tensors (so with the state size), and an
unknown layer type; and Qwen3-Next folders whose fused DeltaNet projections are missing, of
the wrong shape or dtype, or disagree with the head counts, or whose FP8 scales are missing
or in blocks that cut across the key-head groups. `sparkd check` must refuse each
with exit status 2 and a message naming the tensor or the config key, before anything is
allocated.
"""
import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import REPO, check_refuses as refused, run_sparkd
import golden_gguf

HYBRID = REPO / "tests" / "golden" / "models" / "qwen3_5_moe"
NEXT = REPO / "tests" / "golden" / "models" / "qwen3_next"
NEXT_FP8 = REPO / "tests" / "golden" / "models" / "qwen3_next_fp8"
PREFIX = "model.language_model.layers."


def folder(tmp_path, tensors=None, text_config=None, model=HYBRID):
    """A copy of the model with tensors changed (a function of the array, or None to drop it)
    and config keys set (under text_config where the model has one)."""
    d = tmp_path / model.name
    shutil.copytree(model, d)
    if tensors:
        t = load_file(str(d / "model.safetensors"))
        for name, change in tensors.items():
            if change is None:
                del t[name]
            else:
                t[name] = change(t[name])
        save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    if text_config:
        c = json.loads((d / "config.json").read_text())
        (c["text_config"] if "text_config" in c else c).update(text_config)
        (d / "config.json").write_text(json.dumps(c))
    return d


def test_the_unchanged_folder_passes(tmp_path):
    r = run_sparkd("check", "--model", folder(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gated deltanet   3 of 4 layers" in r.stdout
    assert "recurrent state" in r.stdout


@pytest.mark.parametrize("tensor, change, fields", [
    ("0.linear_attn.conv1d.weight", lambda w: w[:, :, :3].copy(),  # a 3-tap kernel where the config says 4
     ["model.layers.0.linear_attn.conv1d.weight is [128, 1, 3], expected [128, 1, 4]", "linear_conv_kernel_dim = 4"]),
    ("1.linear_attn.A_log", lambda w: np.concatenate([w, w]),  # one decay per value head: 4, not 8
     ["model.layers.1.linear_attn.A_log is [8], expected [4]", "linear_num_value_heads = 4"]),
    ("2.mlp.experts.gate_up_proj", lambda w: w[:, :48, :].copy(),  # stacked experts of the wrong width
     ["layers.2.mlp.experts.gate_up_proj has shape [8, 48, 64]", "implies [8, 64, 64]"]),
])
def test_tensor_of_the_wrong_shape(tmp_path, tensor, change, fields):
    refused(folder(tmp_path, tensors={PREFIX + tensor: change}), *fields)


@pytest.mark.parametrize("text_config, fields", [
    ({"linear_num_value_heads": 8}, ["linear_attn.in_proj_qkv.weight is [128, 64], expected [192, 64]",
                                     "linear_num_value_heads = 8"]),
    ({"linear_key_head_dim": 8}, ["linear_attn.in_proj_qkv.weight is [128, 64], expected [96, 64]",
                                  "linear_key_head_dim = 8"]),
    ({"layer_types": ["linear_attention", "sliding_attention", "linear_attention", "full_attention"]},
     ['"layer_types" [1] is "sliding_attention"']),
    ({"linear_num_value_heads": 3}, ['"linear_num_value_heads" = 3 must be a multiple of linear_num_key_heads = 2']),
])
def test_config_disagreeing_with_the_tensors(tmp_path, text_config, fields):
    refused(folder(tmp_path, text_config=text_config), *fields)


def test_the_unchanged_qwen3_next_folder_passes(tmp_path):
    r = run_sparkd("check", "--model", folder(tmp_path, model=NEXT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gated deltanet   3 of 4 layers" in r.stdout and "2 dense layers, shared expert 48" in r.stdout


@pytest.mark.parametrize("tensors, config, fields", [
    ({"model.layers.0.linear_attn.in_proj_ba.weight": None}, None,
     ["model.layers.0.linear_attn.in_proj_ba.weight is missing", "linear_attention layer"]),
    ({"model.layers.1.linear_attn.in_proj_qkvz.weight": lambda w: w[:120].copy()}, None,
     ["in_proj_qkvz.weight has shape [120, 64]", "implies [128, 64]"]),
    ({"model.layers.2.linear_attn.in_proj_qkvz.weight": lambda w: w.astype(np.int32)}, None,
     ["in_proj_qkvz.weight has dtype I32", "must be F32, F16, BF16, F8_E4M3 or whole quantized blocks"]),
    (None, {"linear_value_head_dim": 16},  # the value heads' width: the fused rows no longer add up
     ["in_proj_qkvz.weight has shape [128, 64]", "4 value heads of 16", "implies [192, 64]"]),
    (None, {"mlp_only_layers": [1, 4]}, ['"mlp_only_layers" holds 4, not a layer index']),
])
def test_qwen3_next_fused_projections_and_keys(tmp_path, tensors, config, fields):
    refused(folder(tmp_path, tensors=tensors, text_config=config, model=NEXT), *fields)


QKVZ0 = "model.layers.0.linear_attn.in_proj_qkvz.weight"


def fp8_folder(tmp_path, replace, config=None):
    """A copy of the FP8 model with tensors replaced ((dtype, shape, bytes), or None to drop
    them), edited in the file's own bytes (numpy has no float8 to load it with)."""
    d = tmp_path / NEXT_FP8.name
    shutil.copytree(NEXT_FP8, d)
    raw = (d / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
    for name, new in replace.items():
        if new is None:
            del tensors[name]
        else:
            tensors[name] = new
    out, blobs, at = {}, [], 0
    for k, (dtype, shape, b) in sorted(tensors.items()):
        out[k] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(b)]}
        at += len(b)
        blobs.append(b)
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    (d / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    if config:
        c = json.loads((d / "config.json").read_text())
        c.update(config)
        (d / "config.json").write_text(json.dumps(c))
    return d


def test_qwen3_next_fp8_scales(tmp_path):
    assert run_sparkd("check", "--model", NEXT_FP8).returncode == 0
    refused(fp8_folder(tmp_path / "a", {QKVZ0 + "_scale_inv": None}),
            f"FP8 weight '{QKVZ0}' has no scale tensor '{QKVZ0}_scale_inv'")
    # 32-row blocks: the LIN_QKV rows 0-31 would come from q_0 (rows 0-15 of the fused
    # matrix, block 0) and q_1 (rows 64-79, block 2), which one scale cannot cover.
    ones = np.ones((4, 4), "<f4").tobytes()
    bad = fp8_folder(tmp_path / "b", {QKVZ0 + "_scale_inv": ("F32", [4, 4], ones)},
                     config={"quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 16]}})
    refused(bad, "model.layers.0.linear_attn.in_proj_qkv.weight would take rows of two 32-row scale blocks",
            "do not align with weight_block_size")


def gguf_copy(tmp_path, tensors=None, drop_keys=(), source="qwen3_5_moe.gguf", arch="qwen35moe"):
    """A hybrid GGUF (the Qwen3.5-MoE's by default; source names a file of
    tests/gen/golden_gguf.py, written at test time) rewritten with tensors changed (name ->
    function of the array, or None to leave it out) and metadata keys left out, by the gguf
    package."""
    import gguf
    reader = gguf.GGUFReader(str(golden_gguf.path(source)))
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture" or field.name in drop_keys:
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(field.name, value, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, value, kind)
    for t in reader.tensors:
        change = (tensors or {}).get(t.name, lambda x: x)
        if not change:
            continue
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            assert t.name not in (tensors or {}), f"{t.name}: only F32 and F16 tensors are changed"
            writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)  # BF16 or blocks: the bytes
            continue
        writer.add_tensor(t.name, change(np.array(t.data).reshape([int(d) for d in reversed(t.shape)])))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def generate(path):
    return run_sparkd("generate", "--model", path, "--prompt", "hi", "--max-tokens", "1")


def test_the_unchanged_gguf_loads(tmp_path):
    r = generate(gguf_copy(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    check = run_sparkd("check", "--model", golden_gguf.path("qwen3_5_moe.gguf"))
    assert "gated deltanet   3 of 4 layers" in check.stdout


def test_gguf_with_a_positive_ssm_a_or_a_f16_norm_is_refused(tmp_path):
    r = generate(gguf_copy(tmp_path, {"blk.1.ssm_a": lambda a: -a}))
    assert r.returncode == 2 and "model.layers.1.linear_attn.A_log" in r.stderr and "negative" in r.stderr, r.stderr
    r = generate(gguf_copy(tmp_path, {"blk.0.attn_norm.weight": lambda a: a.astype(np.float16)}))
    assert r.returncode == 2 and "model.layers.0.input_layernorm.weight" in r.stderr and "F32" in r.stderr, r.stderr


def test_gguf_keys_and_tensors_that_disagree_are_refused(tmp_path):
    refused(gguf_copy(tmp_path, drop_keys=("qwen35moe.full_attention_interval",)), "qwen35moe.full_attention_interval")
    refused(gguf_copy(tmp_path, {"blk.0.ssm_conv1d.weight": lambda a: a[:, :3]}), "model.layers.0.linear_attn.conv1d.weight")
    refused(gguf_copy(tmp_path, {"blk.2.ssm_a": lambda a: a[:3]}), "model.layers.2.linear_attn.A_log")


def test_qwen3next_gguf_with_a_fused_projection_of_the_wrong_shape_is_refused(tmp_path):
    """llama.cpp keeps Qwen3-Next's b/a projection fused (ssm_ba): its rows must be the key-head
    groups' 2 x value heads per group, or nothing loads."""
    source = "qwen3_next.gguf"
    r = generate(gguf_copy(tmp_path, source=source, arch="qwen3next"))
    assert r.returncode == 0, r.stdout + r.stderr
    refused(gguf_copy(tmp_path, {"blk.1.ssm_ba.weight": lambda a: a[:6]}, source=source, arch="qwen3next"),
            "model.layers.1.linear_attn.in_proj_ba.weight has shape [6, 64]")
    refused(gguf_copy(tmp_path, drop_keys=("qwen3next.ssm.group_count",), source=source, arch="qwen3next"),
            "qwen3next.ssm.group_count")
