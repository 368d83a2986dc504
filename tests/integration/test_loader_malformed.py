"""Every hostile weight file of PRACTICES.md through `sparkd check --model`: exit 2, a
message naming the problem, no crash, and no huge allocation (run under an address-space
limit far below what the lying sizes would need)."""
import json
import os
import resource
import struct
import subprocess

import pytest

from conftest import REPO, SPARKD

GOLDEN = REPO / "tests" / "golden" / "loader"
AS_LIMIT = 4 << 30  # bytes of address space: a 2^64-byte header or array would need more


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def check_model(path):
    return subprocess.run([str(SPARKD), "check", "--model", str(path)], capture_output=True, text=True,
                          timeout=60, preexec_fn=limited)


# ---- safetensors ------------------------------------------------------------------
def st(header, data_len, declared=None):
    h = header.encode() if isinstance(header, str) else header
    n = len(h) if declared is None else declared
    return struct.pack("<Q", n) + h + bytes(range(256)) * (data_len // 256) + bytes(data_len % 256)


def t(name, dtype, shape, b, e):
    return f'"{name}":{{"dtype":"{dtype}","shape":{json.dumps(shape)},"data_offsets":[{b},{e}]}}'


SAFETENSORS_CASES = {
    "header length 2^64-1": (st("{}", 0, 2**64 - 1), "exceeds the 100 MB limit"),
    "header over 100 MB": (st("{}", 0, 100_000_001), "exceeds the 100 MB limit"),
    "header past EOF": (st("{}", 0, 4096), "runs past the end of the file"),
    "overlapping offsets": (st("{" + t("a", "F32", [2], 0, 8) + "," + t("b", "F32", [2], 4, 12) + "}", 12),
                            "overlaps the previous tensor"),
    "gapped offsets": (st("{" + t("a", "F32", [1], 0, 4) + "," + t("b", "F32", [1], 8, 12) + "}", 12),
                       "gap in the data section"),
    "begin > end": (st("{" + t("a", "F32", [0], 8, 4) + "}", 8), "after its end"),
    "trailing bytes": (st("{" + t("a", "F32", [1], 0, 4) + "}", 20), "16 trailing bytes"),
    "shape product overflow": (st("{" + t("a", "F32", [2**32, 2**32, 2**32], 0, 4) + "}", 4),
                               "shape product overflows"),
    "nbytes != shape x dtype": (st("{" + t("a", "F32", [3], 0, 8) + "}", 8),
                                "holds 8 bytes but its shape and dtype need 12"),
    "duplicate names": (st("{" + t("a", "F32", [1], 0, 4) + "," + t("a", "F32", [1], 4, 8) + "}", 8),
                        "duplicate name 'a'"),
    "unknown dtype": (st("{" + t("a", "Q99", [1], 0, 4) + "}", 4), "unknown dtype 'Q99'"),
    "header not a JSON object": (st("[1, 2, 3]", 0), "header is not a JSON object"),
}


@pytest.mark.parametrize("case", list(SAFETENSORS_CASES))
def test_malformed_safetensors(tmp_path, case):
    data, message = SAFETENSORS_CASES[case]
    (tmp_path / "config.json").write_bytes((GOLDEN / "llama_hf" / "config.json").read_bytes())
    (tmp_path / "model.safetensors").write_bytes(data)
    r = check_model(tmp_path)
    assert r.returncode == 2, f"rc {r.returncode}: {r.stderr}"
    assert message in r.stderr, r.stderr
    assert "model.safetensors" in r.stderr
    assert "internal error" not in r.stderr


# ---- GGUF -------------------------------------------------------------------------
class G:
    def __init__(self, n_tensors, n_kv, version=3):
        self.b = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)

    def put(self, fmt, *v):
        self.b += struct.pack("<" + fmt, *v)
        return self

    def s(self, text):
        raw = text.encode()
        return self.put("Q", len(raw)).raw(raw)

    def raw(self, data):
        self.b += data
        return self

    def tensor(self, name, ne, ggml_type, offset):
        self.s(name).put("I", len(ne))
        for d in ne:
            self.put("Q", d)
        return self.put("IQ", ggml_type, offset)

    def align(self, a=32):
        self.b += bytes(-len(self.b) % a)
        return self

    def data(self, n):
        self.b += bytes([0x3C]) * n
        return self


GGUF_CASES = {
    "string length past EOF": (G(0, 1).put("Q", 5000).data(10).b, "metadata key needs 5000 bytes but only 10 remain"),
    "string length over 16 MiB": (G(0, 1).s("k").put("I", 8).put("Q", 1 << 40).data(16).b, "exceeds the 16 MiB limit"),
    "array count huge": (G(0, 1).s("k").put("IIQ", 9, 10, 1 << 62).data(64).b, "does not fit in the"),
    "n_dims > 4": (G(1, 0).tensor("w", [1, 1, 1, 1, 1], 0, 0).align().data(32).b, "has 5 dimensions (at most 4)"),
    "element count overflow": (G(1, 0).tensor("w", [1 << 32] * 3, 0, 0).align().data(32).b, "element count overflows"),
    "offset + size past EOF": (G(1, 0).tensor("w", [64], 0, 0).align().data(32).b, "extends past the end of the file"),
    "offset near 2^64": (G(1, 0).tensor("w", [8], 0, 2**64 - 32).align().data(32).b, "extends past the end of the file"),
    "unknown tensor type": (G(1, 0).tensor("w", [32], 77, 0).align().data(128).b, "unknown tensor type 77"),
    "unknown value type": (G(0, 1).s("k").put("II", 42, 0).b, "unknown metadata value type 42"),
    "misaligned data": (G(1, 0).tensor("w", [4], 0, 8).align().data(64).b, "is not a multiple of the alignment 32"),
}


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_malformed_gguf(tmp_path, case):
    data, message = GGUF_CASES[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    r = check_model(path)
    assert r.returncode == 2, f"rc {r.returncode}: {r.stderr}"
    assert message in r.stderr, r.stderr
    assert "bad.gguf" in r.stderr
    assert "internal error" not in r.stderr


def test_truncated_real_gguf(tmp_path):
    """A valid model file cut short anywhere is refused cleanly."""
    whole = (GOLDEN / "qwen3moe.gguf").read_bytes()
    for cut in (7, 100, 1000, len(whole) // 2, len(whole) - 40):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(whole[:cut])
        r = check_model(path)
        assert r.returncode == 2, f"cut {cut}: rc {r.returncode}: {r.stderr}"
        assert "GGUF file" in r.stderr


def test_tensor_set_mismatch_is_listed(tmp_path):
    """A folder whose tensors do not match its config names what is missing."""
    src = GOLDEN / "qwen2_hf"
    cfg = json.loads((src / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    r = check_model(tmp_path)
    assert r.returncode == 2, r.stderr
    assert "missing tensors: model.layers.2." in r.stderr
