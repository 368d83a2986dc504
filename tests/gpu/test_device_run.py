"""The GPU bundle and the one command that runs it on a lent GPU machine, rehearsed here.

`make test` builds the bundle of this build's CUDA architectures (when nvcc is here) and
the emulated bundle (the CUDA emulator's checks, tests/gpu/emu), then runs this file:
  * the GPU bundle: at most 24 MiB, every check program in its one executable;
  * tests/gpu/device_run.py --dry-run on the emulated bundle, as README's device command runs
    it: the result files (no more than the lent machine sends back), their schema, the rows
    of the checks it ran, the compass's projections and the skipped parts' reasons;
  * a budget too small for the work: the part is cut, says so, and the run still ends in
    time with its files written;
  * a wrong bundle, or a GPU bundle without a GPU, is refused before anything runs.
SPARKD_GPU_BUNDLE names the GPU bundle (required when set), SPARKD_EMU_BUNDLE the emulated one.
"""
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import time

import jsonschema
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "gpu" / "device_run.py"
LIMIT_MIB = 24
CHECK_NAMES = sorted(p.stem for p in (REPO / "tests" / "gpu").glob("check_*.cu"))
ROW = {"type": "object", "additionalProperties": False,
       "required": ["part", "check", "what", "measured", "limit", "result"],
       "properties": {"part": {"enum": ["device", "checks", "compass", "serve", "smollm2"]},
                      "check": {"type": "string", "minLength": 1}, "what": {"type": "string", "minLength": 1},
                      "measured": {"type": "string"}, "limit": {"type": "string"},
                      "result": {"enum": ["PASS", "FAIL", "INFO", "SKIP"]}}}
SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["schema", "dry_run", "budget_s", "wall_s", "bundle", "device", "parts", "counts", "rows"],
    "properties": {
        "schema": {"const": "sparkd-gpu-run/1"}, "dry_run": {"type": "boolean"},
        "budget_s": {"type": "number", "exclusiveMinimum": 0}, "wall_s": {"type": "number", "minimum": 0},
        "bundle": {"type": "object", "required": ["built_for", "emulated", "git_rev", "built_utc", "checks"]},
        "device": {"type": "object"},
        "parts": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "budget_s", "wall_s", "cut"],
            "properties": {"name": {"type": "string"}, "budget_s": {"type": "number", "minimum": 0},
                           "wall_s": {"type": "number", "minimum": 0}, "cut": {"type": "boolean"}}}},
        "counts": {"type": "object", "required": ["PASS", "FAIL", "INFO", "SKIP"],
                   "additionalProperties": {"type": "integer", "minimum": 0}},
        "rows": {"type": "array", "items": ROW},
    },
}


def bundle_path(var):
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"{var} is not set (make test sets it)")
    path = pathlib.Path(value)
    assert path.is_file(), f"{var}={value}: no such bundle; make test builds it first"
    return path


def members(bundle):
    with tarfile.open(bundle, "r:xz") as tar:
        return {m.name: m for m in tar.getmembers()}


def manifest(bundle):
    with tarfile.open(bundle, "r:xz") as tar:
        return json.loads(tar.extractfile("sparkd-gpu/MANIFEST.json").read())


def run(bundle, out, *args, timeout=900):
    return subprocess.run([sys.executable, str(RUNNER), str(bundle), "--out", str(out), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def check_layout(bundle):
    size = bundle.stat().st_size
    print(f"\n{bundle.name}: {size / 2**20:.1f} MiB of {LIMIT_MIB}")
    assert size <= LIMIT_MIB * 2**20, f"{bundle} is {size / 2**20:.1f} MiB, over {LIMIT_MIB} MiB"
    m = members(bundle)
    assert m["sparkd-gpu/bin/gpu_checks"].isfile()
    sparkd = m["sparkd-gpu/bin/sparkd"]  # the same executable on a GPU build; its own copy when emulated
    assert sparkd.isfile() or (sparkd.issym() and sparkd.linkname == "gpu_checks")
    for name in CHECK_NAMES:
        link = m[f"sparkd-gpu/bin/{name}"]
        assert link.issym() and link.linkname == "gpu_checks", name
    assert manifest(bundle)["checks"] == CHECK_NAMES


def test_gpu_bundle_holds_every_check_within_the_limit():
    bundle = bundle_path("SPARKD_GPU_BUNDLE")
    check_layout(bundle)
    assert manifest(bundle)["emulated"] is False and manifest(bundle)["built_for"].startswith("sm_")
    assert members(bundle)["sparkd-gpu/bin/sparkd"].issym()


def test_dry_run_writes_the_table_and_rows_the_device_run_would(tmp_path):
    bundle = bundle_path("SPARKD_EMU_BUNDLE")
    check_layout(bundle)
    out = tmp_path / "out"
    p = run(bundle, out, "--dry-run", "--checks", "check_load,check_speculative")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # What the lent machine sends back: at most 8 files, each well under 16 MiB.
    files = sorted(f.name for f in out.iterdir())
    assert files == ["gpu_logs.tar.xz", "gpu_rows.json", "gpu_table.txt"], files
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    doc = json.loads((out / "gpu_rows.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["dry_run"] is True and [p["name"] for p in doc["parts"]] == ["device", "checks", "compass", "serve", "smollm2"]
    rows = doc["rows"]
    assert doc["counts"] == {k: sum(r["result"] == k for r in rows) for k in ("PASS", "FAIL", "INFO", "SKIP")}
    assert doc["counts"]["FAIL"] == 0
    # Both programs ran through their links and their rows arrived (check names as they print them).
    for check in ("load", "speculative"):
        assert sum(r["check"] == check and r["result"] == "PASS" for r in rows) >= 3, check
    # The compass projects each shape with the h100 preset; without a GPU nothing is measured.
    compass = [r for r in rows if r["part"] == "compass"]
    assert {r["check"] for r in compass} == {"llama3_8b", "qwen3_30b_a3b", "gpt_oss_20b"}
    for r in compass:
        if r["result"] == "INFO":
            assert r["limit"].startswith("~") and "tok/s projected" in r["limit"], r
        else:
            assert r["result"] == "SKIP" and "no copy bandwidth" in r["limit"], r
    for part in ("serve", "smollm2"):
        skipped = [r for r in rows if r["part"] == part]
        assert skipped and all(r["result"] == "SKIP" and r["limit"].startswith("dry run") for r in skipped), skipped
    table = (out / "gpu_table.txt").read_text()
    assert table.splitlines()[-1].startswith("gpu-run (dry run): ") and " 0 failed" in table.splitlines()[-1]
    assert len(table.splitlines()) == len(rows) + 2
    with tarfile.open(out / "gpu_logs.tar.xz") as tar:
        assert {"logs/check_load.log", "logs/check_speculative.log"} <= set(tar.getnames())


def test_a_part_over_its_budget_is_cut_and_the_run_ends_in_time(tmp_path):
    bundle = bundle_path("SPARKD_EMU_BUNDLE")
    out = tmp_path / "out"
    budget = 12
    began = time.monotonic()
    # check_model takes minutes on the emulator: the whole budget goes before it ends.
    p = run(bundle, out, "--dry-run", "--checks", "check_model,check_load", "--budget", str(budget))
    wall = time.monotonic() - began
    assert wall < budget + 20, f"the run took {wall:.0f} s on a {budget} s budget"
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "gpu_rows.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    rows = doc["rows"]
    cut = [r for r in rows if r["check"] == "check_model" and r["what"] == "cut"]
    assert len(cut) == 1 and cut[0]["result"] == "SKIP" and "budget" in cut[0]["limit"], rows
    not_run = [r for r in rows if r["check"] == "check_load"]
    assert not_run and not_run[0]["what"] == "not run" and "budget" in not_run[0]["limit"], not_run
    assert next(p for p in doc["parts"] if p["name"] == "checks")["cut"] is True
    # The later parts had nothing left: each says so rather than vanishing.
    for part in ("compass", "serve", "smollm2"):
        assert any(r["part"] == part and r["result"] == "SKIP" for r in rows), part


def test_wrong_bundles_are_refused_before_anything_runs(tmp_path):
    emulated = bundle_path("SPARKD_EMU_BUNDLE")
    p = run(emulated, tmp_path / "a")
    assert p.returncode == 2 and "emulated bundle" in p.stderr and "--dry-run" in p.stderr, p.stderr
    junk = tmp_path / "junk.tar.xz"
    junk.write_bytes(b"not an archive")
    p = run(junk, tmp_path / "b", "--dry-run")
    assert p.returncode == 2 and "junk.tar.xz" in p.stderr, p.stderr
    p = run(emulated, tmp_path / "c", "--dry-run", "--checks", "check_nothing")
    assert p.returncode == 2 and "no check named check_nothing" in p.stderr, p.stderr
    assert not (tmp_path / "a" / "gpu_rows.json").exists() and not (tmp_path / "b" / "gpu_rows.json").exists()
