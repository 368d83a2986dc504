"""Hostile gpt-oss files through `sparkd check --model`: a wrong MXFP4 *_scales shape, a
zero or negative sliding window, sinks of the wrong length, an unknown layer_types entry,
in the Hugging Face folder and in the GGUF file. Each must exit 2 with a message naming the
tensor or the field; the untouched model must pass (so the checks can fail)."""
import json
import shutil
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import REPO, SPARKD
import golden_gguf

MODEL = REPO / "tests" / "golden" / "models" / "gpt_oss"


def gguf_model():
    """The model as llama.cpp's GGUF, written at test time (tests/gen/golden_gguf.py)."""
    return golden_gguf.path("gpt_oss.gguf")


def check_model(path):
    return subprocess.run([str(SPARKD), "check", "--model", str(path)], capture_output=True, text=True, timeout=60)


def copy_model(tmp_path, config_edit=None, tensor_edit=None):
    out = tmp_path / "m"
    shutil.copytree(MODEL, out)
    if config_edit:
        cfg = json.loads((out / "config.json").read_text())
        config_edit(cfg)
        (out / "config.json").write_text(json.dumps(cfg))
    if tensor_edit:
        tensors = load_file(out / "model.safetensors")
        tensor_edit(tensors)
        save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_the_untouched_model_passes(tmp_path):
    r = check_model(copy_model(tmp_path))
    assert r.returncode == 0, r.stderr
    r = check_model(gguf_model())
    assert r.returncode == 0, r.stderr


def drop_last_scale_row(t):
    name = "model.layers.2.mlp.experts.gate_up_proj_scales"
    t[name] = np.ascontiguousarray(t[name][:, :-1])


def short_sinks(t):
    name = "model.layers.1.self_attn.sinks"
    t[name] = np.ascontiguousarray(t[name][:-1])


def scales_as_f32(t):
    name = "model.layers.0.mlp.experts.down_proj_scales"
    t[name] = t[name].astype(np.float32)


def no_scales(t):
    del t["model.layers.3.mlp.experts.down_proj_scales"]


def set_key(key, value):
    return lambda cfg: cfg.__setitem__(key, value)


def set_layer_type(i, value):
    def edit(cfg):
        cfg["layer_types"][i] = value
    return edit


CASES = {
    "wrong scales shape": (None, drop_last_scale_row,
                           "model.layers.2.mlp.experts.gate_up_proj_scales has shape [8, 127, 2]"),
    "scales not U8": (None, scales_as_f32, "model.layers.0.mlp.experts.down_proj_scales must be U8"),
    "scales missing": (None, no_scales, "model.layers.3.mlp.experts.down_proj_scales is missing"),
    "sinks of the wrong length": (None, short_sinks, "model.layers.1.self_attn.sinks is [3], expected [4]"),
    "zero sliding window": (set_key("sliding_window", 0), None, '"sliding_window" = 0 must be a positive'),
    "negative sliding window": (set_key("sliding_window", -128), None, '"sliding_window" = -128 must be a positive'),
    "unknown layer_types entry": (set_layer_type(2, "chunked_attention"), None,
                                  '"layer_types" [2] = "chunked_attention" is not one of'),
    "layer_types too short": (lambda cfg: cfg["layer_types"].pop(), None, '"layer_types" must list one type per layer'),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_gptoss_folder(tmp_path, case):
    config_edit, tensor_edit, needle = CASES[case]
    r = check_model(copy_model(tmp_path, config_edit, tensor_edit))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr


def gguf_with(tmp_path, key, value):
    """The GGUF file with one integer metadata value rewritten in place (same width)."""
    import gguf
    source = gguf_model()
    reader = gguf.GGUFReader(source)
    field = reader.fields[key]
    data = bytearray(source.read_bytes())
    offset = field.parts[field.data[0]].__array_interface__["data"][0] - reader.data.__array_interface__["data"][0]
    width = field.parts[field.data[0]].nbytes
    data[offset:offset + width] = int(value).to_bytes(width, "little", signed=True)
    out = tmp_path / "m.gguf"
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("value", [0, -8])
def test_hostile_gptoss_gguf_sliding_window(tmp_path, value):
    r = check_model(gguf_with(tmp_path, "gpt-oss.attention.sliding_window", value))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "gpt-oss.attention.sliding_window" in r.stderr, r.stderr
