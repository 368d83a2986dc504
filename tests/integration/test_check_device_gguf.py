"""`sparkd check --model FILE --device gb10` on the quantized files Spark owners run:
Llama-3.1-8B, Qwen2.5-32B and Llama-3.3-70B in Q4_K_M, Qwen3-30B-A3B in Q8_0 and Q4_K_M.
The files are the real models' GGUF headers with their data section left a hole
(tests/gen/shape_gguf.py, written by the gguf package), so the plan reads what it would
read from the real file; the expected bytes are the tensor table's, summed here."""
import re
import sys

import pytest

from conftest import REPO, run_sparkd

sys.path.insert(0, str(REPO / "tests" / "gen"))
import shape_gguf  # noqa: E402

GIB = 1 << 30
GB10_COPY = 218e9

CASES = [("llama-3.1-8b", "Q4_K_M", 4.8, 5.0), ("qwen2.5-32b", "Q4_K_M", 19.0, 20.5),
         ("llama-3.3-70b", "Q4_K_M", 41.0, 43.5), ("qwen3-30b-a3b", "Q8_0", 31.5, 33.0),
         ("qwen3-30b-a3b", "Q4_K_M", 17.5, 19.0)]


@pytest.mark.parametrize("model,qtype,lo_gb,hi_gb", CASES)
def test_check_device_plans_a_quantized_file(tmp_path, model, qtype, lo_gb, hi_gb):
    path = tmp_path / f"{model}-{qtype}.gguf"
    file_bytes = shape_gguf.write(path, model, qtype)
    # The published files are about this size: the tensor table matches the real model's.
    assert lo_gb < file_bytes / 1e9 < hi_gb
    r = run_sparkd("check", "--model", path, "--device", "gb10")
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"\n{model} {qtype}:\n" + r.stdout[r.stdout.index("device plan"):])
    m = re.search(r"weights +([\d.]+) GiB on the device \(the file's tensors: ([\d.]+) GiB", r.stdout)
    device, listed = float(m.group(1)), float(m.group(2))
    assert abs(listed - file_bytes / GIB) < 0.01
    assert 1.0 <= device / listed <= 1.02  # packed as in the file (routers and norms kept f32)
    kv = re.search(r"kv blocks +\d+ \((\d+) tokens", r.stdout)
    assert kv and int(kv.group(1)) > 32768
    rate = re.search(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token", r.stdout)
    read = float(rate.group(2))
    assert abs(int(rate.group(1)) - GB10_COPY / (read * GIB)) <= 1
    if "a3b" in model:
        assert read < device / 4  # a decode step reads the routed experts, not all 128
    else:
        assert read < device  # the embedding table is gathered, not read whole


# The hybrids of the Spark playbooks as llama.cpp writes them (qwen35moe, qwen35; the MTP
# block after the layers): Qwen3.6-35B-A3B in Q6_K, which llama.cpp decodes at 56.9 tokens/s
# at batch 1 on a Spark, and Qwen3.5-27B in Q4_K_M. (model, type, file GB range, recurrent
# state a sequence, KV bytes a token: 10 or 16 attention layers x K and V x kv heads x 256
# x bf16, llama.cpp's measured rate or None)
HYBRID_CASES = [("qwen3.6-35b-a3b", "Q6_K", 28.5, 30.0, "62.8 MiB", 10 * 2 * 2 * 256 * 2, 56.9),
                ("qwen3.5-27b", "Q4_K_M", 16.0, 17.0, "149.6 MiB", 16 * 2 * 4 * 256 * 2, None)]


@pytest.mark.parametrize("model,qtype,lo_gb,hi_gb,state,kv_per_token,peer", HYBRID_CASES)
def test_check_device_plans_a_hybrid_file(tmp_path, model, qtype, lo_gb, hi_gb, state, kv_per_token, peer):
    path = tmp_path / f"{model}-{qtype}.gguf"
    file_bytes = shape_gguf.write(path, model, qtype)
    assert lo_gb < file_bytes / 1e9 < hi_gb
    r = run_sparkd("check", "--model", path, "--device", "gb10")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout[r.stdout.index("device plan"):]
    print(f"\n{model} {qtype}:\n" + out)
    assert f"recurrent state  {state} per sequence" in out
    assert f"{kv_per_token} bytes/token" in out
    assert "fits             yes" in out
    fit = re.search(r"\((\d+) blocks per full sequence, (\d+) fit at once\)", out)
    assert fit and int(fit.group(2)) >= 1
    m = re.search(r"weights +([\d.]+) GiB on the device \(the file's tensors: ([\d.]+) GiB", out)
    # Packed as in the file; the MTP block is in the file but not read.
    assert 1.0 <= float(m.group(1)) / float(m.group(2)) <= 1.02
    assert float(m.group(2)) < file_bytes / GIB
    rate = re.search(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token / 218 GB/s "
                     r"\(the weights, and the recurrent state read and written\)", out)
    assert rate, out
    assert abs(int(rate.group(1)) - GB10_COPY / (float(rate.group(2)) * GIB)) <= 1
    if peer:
        print(f"{model} {qtype}: projected {rate.group(1)} tokens/s at batch 1, llama.cpp measured {peer}")


# Gemma 4 as llama.cpp writes it (gemma4): 31B dense and 26B-A4B (the dense MLP beside 128
# experts), Q4_K_M with llama-quantize's fallbacks for rows not of whole 256-value blocks
# (the 26B's 704-wide experts and 2112-wide MLP: Q5_0 and Q8_0). KV a token by layer type:
# sliding layers 2 x kv heads x 256 x bf16, every 6th layer 2 x kv heads x 512 (31B: 16
# and 4 heads; 26B: 8 and 2). Ollama's measured batch-1 decode on a Spark beside each.
# (model, file GB range, KV bytes a token: all layers and the sliding ones', Ollama tok/s)
GEMMA_CASES = [("gemma-4-31b", 18.0, 19.5, 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2, 50 * 2 * 16 * 256 * 2, 10.34),
               ("gemma-4-26b-a4b", 16.0, 17.5, 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2, 25 * 2 * 8 * 256 * 2, 58.7)]


@pytest.mark.parametrize("model,lo_gb,hi_gb,kv_per_token,kv_sliding,ollama", GEMMA_CASES)
def test_check_device_plans_gemma4(tmp_path, model, lo_gb, hi_gb, kv_per_token, kv_sliding, ollama):
    path = tmp_path / f"{model}-Q4_K_M.gguf"
    file_bytes = shape_gguf.write(path, model, "Q4_K_M")
    assert lo_gb < file_bytes / 1e9 < hi_gb
    r = run_sparkd("check", "--model", path, "--device", "gb10", "--set", "model.max_model_len=131072")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    print(f"\n{model} Q4_K_M:\n" + out[out.index("attention"):out.index("vocab")] + out[out.index("device plan"):])
    assert "full layers" in out and "K = V" in out and "proportional" in out
    assert f"{kv_per_token} bytes/token" in out
    assert f"{kv_sliding} of the {kv_per_token} bytes/token" in out  # the window-only blocks
    assert "fits             yes" in out
    m = re.search(r"weights +([\d.]+) GiB on the device \(the file's tensors: ([\d.]+) GiB", out)
    assert abs(float(m.group(2)) - file_bytes / GIB) < 0.01
    rate = re.search(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token", out)
    assert abs(int(rate.group(1)) - GB10_COPY / (float(rate.group(2)) * GIB)) <= 1
    # Every matrix packed as the file stores it, the 26B's Q5_0 rows too.
    assert float(m.group(1)) / float(m.group(2)) <= 1.02
    if "a4b" in model:  # a decode step reads the dense MLP and 8 of the 128 experts
        assert float(rate.group(2)) < float(m.group(1)) / 5
    print(f"{model} Q4_K_M: projected {rate.group(1)} tokens/s at batch 1, Ollama measured {ollama}")
