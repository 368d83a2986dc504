"""`sparkd check --device gb10` on a Qwen3-30B-A3B-shaped dummy (config.json only, BF16): the
weights, the KV capacity, and a projected batch-1 rate from the bytes a decode step reads,
which for an MoE model are attention, router, the top-k experts and the LM head, not all
128 experts. The expected bytes are counted here from config.json alone.
"""
import json
import re

from conftest import REPO, run_sparkd

CONFIG = REPO / "tests" / "golden" / "configs" / "qwen3_30b_a3b"
GIB = 1 << 30


def active_bf16_bytes(c):
    h, hd, L = c["hidden_size"], c["head_dim"], c["num_hidden_layers"]
    attn = h * hd * (c["num_attention_heads"] * 2 + c["num_key_value_heads"] * 2)
    experts = c["num_experts_per_tok"] * 3 * h * c["moe_intermediate_size"]
    router = c["num_experts"] * h
    norms = 2 * h + 2 * hd
    return 2 * (L * (attn + experts + router + norms) + c["vocab_size"] * h + h)


def test_check_device_projects_moe_rate_from_active_bytes():
    r = run_sparkd("check", "--model", CONFIG, "--set", 'model.load_format="dummy"', "--device", "gb10")
    assert r.returncode == 0, r.stderr
    weights = float(re.search(r"weights +([\d.]+) GiB on the device", r.stdout).group(1))
    m = re.search(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token / 218 GB/s", r.stdout)
    assert m, r.stdout
    rate, read = int(m.group(1)), float(m.group(2))
    assert re.search(r"kv blocks +\d+ \(\d+ tokens", r.stdout)
    c = json.loads((CONFIG / "config.json").read_text())
    want = active_bf16_bytes(c) / GIB
    assert abs(read - want) / want < 0.02, (read, want)  # norms kept f32 on the device: within 2%
    assert 55 < weights < 58                                # 30.5 B parameters in BF16
    assert abs(rate - 218e9 / (read * GIB)) <= 1
