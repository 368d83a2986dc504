"""Hostile mixture-of-experts files: an expert count, top-k or expert shape that disagrees
with the tensors, and top-k above the expert count, in a Hugging Face folder and in a GGUF
file. `sparkd check` must refuse each with exit status 2 and a message naming the field.
"""
import json
import shutil
import sys
import types

import gguf
import pytest
from safetensors.numpy import load_file

from conftest import REPO, check_refuses as refused, run_sparkd

sys.path.insert(0, str(REPO / "tests" / "gen"))
from gen_loader_golden import write_gguf_model  # noqa: E402

MOE = REPO / "tests" / "golden" / "models" / "qwen3_moe"


def folder_with(tmp_path, **config):
    d = tmp_path / "moe"
    shutil.copytree(MOE, d)
    c = json.loads((d / "config.json").read_text())
    c.update(config)
    (d / "config.json").write_text(json.dumps(c))
    return d


@pytest.mark.parametrize("config, fields", [
    ({"num_experts": 16}, ["num_experts (GGUF expert_count) = 16", "experts.8."]),  # more experts than the file holds
    ({"num_experts": 4}, ["num_experts (GGUF expert_count) = 4", "experts.4."]),    # fewer: the file's extra experts
    ({"moe_intermediate_size": 16}, ["moe_intermediate_size (expert_feed_forward_length) = 16"]),  # expert shape
    ({"num_experts_per_tok": 9}, ["num_experts_per_tok"]),             # top-k above the expert count
    ({"num_experts_per_tok": 0}, ["num_experts_per_tok"]),
])
def test_hf_moe_config_disagreeing_with_the_tensors(tmp_path, config, fields):
    refused(folder_with(tmp_path, **config), *fields)


def gguf_moe(tmp_path, expert_count=None, **config):
    c = types.SimpleNamespace(**json.loads((MOE / "config.json").read_text()))
    vars(c).update(config)
    path = tmp_path / "moe.gguf"
    writer = gguf.GGUFWriter.add_expert_count
    if expert_count is not None:  # metadata that disagrees with the stacked tensors
        gguf.GGUFWriter.add_expert_count = lambda self, n: writer(self, expert_count)
    try:
        write_gguf_model(str(path), "qwen3moe", c, c.head_dim, load_file(str(MOE / "model.safetensors")))
    finally:
        gguf.GGUFWriter.add_expert_count = writer
    return path


def test_gguf_moe_well_formed_is_accepted(tmp_path):
    r = run_sparkd("check", "--model", gguf_moe(tmp_path))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("expert_count, config, fields", [
    (16, {}, ["expert_count) = 16", "experts.8."]),  # the stacked tensors hold 8
    (4, {}, ["expert_count) = 4", "experts.4."]),
    (None, {"num_experts_per_tok": 9}, ["expert_used_count"]),  # top-k above the expert count
    (None, {"moe_intermediate_size": 16}, ["expert_feed_forward_length) = 16"]),  # the tensors' rows are 32
])
def test_gguf_moe_metadata_disagreeing_with_the_tensors(tmp_path, expert_count, config, fields):
    refused(gguf_moe(tmp_path, expert_count, **config), *fields)
