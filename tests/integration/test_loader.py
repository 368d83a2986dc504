"""sparkd check on real and dummy models, and the loader oracle comparisons re-run live:
the golden generator writes fresh files with the reference packages, and the unit tests
compare sparkd's reading of them."""
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import MODEL, REPO, SPARKD, run_sparkd

UNIT_TESTS = SPARKD.parent / "unit_tests"
GiB = 1 << 30


def meminfo_env(tmp_path, available):
    """A fixed MemAvailable, so the plan does not depend on the machine running the test."""
    p = tmp_path / "meminfo"
    p.write_text(f"MemTotal:       {available // 1024 * 2} kB\nMemAvailable:   {available // 1024} kB\n")
    return {**os.environ, "SPARKD_MEMINFO": str(p)}


def test_check_smollm2_prints_spec_and_plan(tmp_path):
    # The CPU backend plans against MemAvailable, which the test fixes.
    r = run_sparkd("check", "--model", MODEL, "--set", 'engine.backend="cpu"', env=meminfo_env(tmp_path, 16 * GiB),
                   timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # The spec, against what the gguf package reads from the same file.
    reader = gguf.GGUFReader(str(MODEL))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
    assert "architecture     LlamaForCausalLM" in out
    assert f"layers           {meta['llama.block_count']}, hidden {meta['llama.embedding_length']}" in out
    assert (f"{meta['llama.attention.head_count']} heads, {meta['llama.attention.head_count_kv']} kv heads, "
            f"head_dim {meta['llama.rope.dimension_count']}") in out
    assert f"vocab            {reader.tensors[0].shape[1]}, tied embeddings" in out
    # Parameters: every tensor of the file (tied, so no output.weight), counted by gguf.
    n_params = sum(int(np.prod(t.shape)) for t in reader.tensors)
    assert f"({n_params})" in out
    stored = sum(int(t.n_bytes) for t in reader.tensors)
    assert "weights          " in out
    weights_line = next(l for l in out.splitlines() if l.strip().startswith("weights"))
    assert f"{stored / (1 << 20):.1f} MiB" in weights_line
    # KV as the CPU backend stores it: 2 (K, V) x 30 layers x 3 kv heads x 64 x 4 bytes (f32).
    assert "kv cache dtype   f32" in out
    assert f"{2 * 30 * 3 * 64 * 4} bytes/token" in out
    assert "MemAvailable" in out
    assert "fits             yes" in out


def write_config(tmp_path, lines):
    cfg = tmp_path / "spark.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_check_dummy_llama3_8b_plans_without_weights(tmp_path):
    model = REPO / "tests" / "golden" / "configs" / "llama3_8b"
    assert not any(model.glob("*.safetensors"))
    cfg = write_config(tmp_path, ["[model]", f'path = "{model}"', 'load_format = "dummy"', "max_model_len = 8192",
                                  "[engine]", 'backend = "cpu"'])
    r = run_sparkd("check", "--config", cfg, env=meminfo_env(tmp_path, 64 * GiB), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "8.030 B (8030261248)" in r.stdout
    assert "dummy weights in BF16, no weight file read" in r.stdout
    assert f"{8030261248 * 2 / GiB:.2f} GiB" in r.stdout
    assert "262144 bytes/token" in r.stdout  # 2 x 32 layers x 8 kv heads x 128 x 4 (f32 on the CPU)
    assert "fits             yes" in r.stdout
    # An fp8 KV cache is a CUDA backend feature: the CPU backend says so instead of
    # silently planning a cache it would not store.
    r = run_sparkd("check", "--config", cfg, "--set", 'engine.kv_cache_dtype="fp8"',
                   env=meminfo_env(tmp_path, 64 * GiB), timeout=60)
    assert r.returncode == 2
    assert 'kv_cache_dtype = "fp8" needs the CUDA backend' in r.stderr


def test_check_refuses_a_plan_that_does_not_fit(tmp_path):
    model = REPO / "tests" / "golden" / "configs" / "llama3_8b"
    cfg = write_config(tmp_path, ["[model]", f'path = "{model}"', 'load_format = "dummy"', "[engine]", 'backend = "cpu"'])
    r = run_sparkd("check", "--config", cfg, env=meminfo_env(tmp_path, 8 * GiB), timeout=60)
    assert r.returncode == 2
    assert "the model does not fit" in r.stderr
    assert "weights 14.96 GiB" in r.stderr
    assert "leaves nothing for the KV cache" in r.stderr
    # Enough for the weights but not for one 131072-token sequence: names the setting.
    r = run_sparkd("check", "--config", cfg, env=meminfo_env(tmp_path, 24 * GiB), timeout=60)
    assert r.returncode == 2
    assert "set model.max_model_len to at most" in r.stderr


def test_check_usage_errors():
    assert run_sparkd("check").returncode == 2
    r = run_sparkd("check", "--model", "/nonexistent/x.gguf")
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = run_sparkd("check", "--model", REPO / "tests" / "golden" / "configs" / "llama3_8b")
    assert r.returncode == 2 and "neither model.safetensors" in r.stderr


def test_loader_oracles_live(tmp_path):
    """Regenerates the golden files with the reference packages and re-runs the unit
    tests that compare sparkd's reading of them."""
    gen = subprocess.run([sys.executable, str(REPO / "tests" / "gen" / "gen_loader_golden.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    assert (tmp_path / "golden.json").exists()
    assert UNIT_TESTS.exists(), f"{UNIT_TESTS} is not built"
    r = subprocess.run([str(UNIT_TESTS), "-tc=safetensors:*,gguf:*,quant:*,model spec:*,weights:*",
                        "--no-version"], capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "SPARKD_LOADER_GOLDEN": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 failed" in r.stdout
