#!/usr/bin/env python3
"""Builds deliberately broken copies of sparkd and runs the tests that name each broken
behaviour: a test suite that still passes with the behaviour switched off proves nothing.

Each tests/mutants/*.patch is a small unified diff with a header:

    # behaviour: what the patch switches off
    # tests: unit:<doctest test-case pattern, '?' for a space> | <pytest node id>  (repeatable)

The tree is copied once into build/mutants/tree with a CPU-only build's objects; for each mutant
the patch is applied there, sparkd and/or the unit tests are rebuilt (only the changed
files recompile), the named tests run, and the patched files are restored. One line per
mutant: killed, SURVIVED, does not apply, or does not build; then a total. Exit status 1
if any mutant survived, did not apply or did not build.

    tests/mutants/run.py [--base DIR] [--jobs N] [NAME ...]      (make mutants runs it)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MUTANTS = REPO / "tests" / "mutants"
TEST_TIMEOUT_S = 600


def parse_header(patch):
    behaviour, tests = None, []
    for line in patch.read_text().splitlines():
        if line.startswith("# behaviour:"):
            behaviour = line.split(":", 1)[1].strip()
        elif line.startswith("# tests:"):
            tests += line.split(":", 1)[1].split()
        elif line.startswith("--- "):
            break
    if not behaviour or not tests:
        raise SystemExit(f"{patch.name}: needs '# behaviour:' and '# tests:' header lines")
    return behaviour, tests


def patched_files(patch):
    return [m.group(1) for m in re.finditer(r"^\+\+\+ b/(\S+)", patch.read_text(), re.M)]


def copy_tree(tree, base):
    """The tracked and untracked (not ignored) files, the CPU-only build's objects, and links
    to the venv and the models."""
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.split(b"\0")
    for f in filter(None, files):
        src = REPO / os.fsdecode(f)
        if not src.is_file():
            continue
        dst = tree / os.fsdecode(f)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)  # real copies: a patch must never reach the worktree
    (tree / "build").mkdir()
    for name in ("obj", "test-hooks", ".deps-stamp", "gen"):
        if (base / name).is_dir():
            shutil.copytree(base / name, tree / "build" / name, symlinks=True)
        elif (base / name).exists():
            shutil.copy2(base / name, tree / "build" / name)
    (tree / "build" / "venv").symlink_to(REPO / "build" / "venv")
    (tree / "build" / "third_party").symlink_to(REPO / "build" / "third_party")
    (tree / "models").symlink_to(REPO / "models")


def run(cmd, cwd, env=None, timeout=None):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def make_targets(tests):
    targets = set()
    for t in tests:
        targets |= {"build/unit_tests"} if t.startswith("unit:") else {"build/sparkd", "build/test-hooks/sparkd"}
    return sorted(targets)


def run_tests(tree, tests, log):
    """True when every named test passes (the mutant survived)."""
    env = {**os.environ, "SPARKD_BIN": str(tree / "build" / "sparkd")}
    units = [t[len("unit:"):] for t in tests if t.startswith("unit:")]
    nodes = [t for t in tests if not t.startswith("unit:")]
    passed = True
    if units:
        r = run([str(tree / "build" / "unit_tests"), "--test-case=" + ",".join(units)],
                tree, env, TEST_TIMEOUT_S)
        log.write(r.stdout + r.stderr)
        passed &= r.returncode == 0 and "test cases: 0 " not in r.stdout
    if nodes and passed:
        r = run([str(tree / "build" / "venv" / "bin" / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                 *nodes], tree, env, TEST_TIMEOUT_S)
        log.write(r.stdout + r.stderr)
        passed &= r.returncode == 0
    return passed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=str(REPO / "build" / "mutants" / "base"),
                    help="a CUDA=0 build directory whose objects the copies start from")
    ap.add_argument("--jobs", default="2")
    ap.add_argument("names", nargs="*", help="mutant names (file stems); all when none")
    args = ap.parse_args()
    base = Path(args.base).resolve()
    patches = sorted(MUTANTS.glob("*.patch"))
    if args.names:
        patches = [p for p in patches if p.stem in args.names]
    tree = REPO / "build" / "mutants" / "tree"
    logs = REPO / "build" / "mutants" / "logs"
    copy_tree(tree, base)
    logs.mkdir(parents=True, exist_ok=True)
    # Linked without debug info: five times faster, and no test here reads it.
    make = ["make", "--no-print-directory", "-j" + args.jobs, "CUDA=0",
            "LDFLAGS=-static-libstdc++ -static-libgcc -pthread -Wl,--strip-debug"]

    counts = {}
    t_all = time.monotonic()
    for patch in patches:
        behaviour, tests = parse_header(patch)
        t0 = time.monotonic()
        files = patched_files(patch)
        saved = {f: (tree / f).read_bytes() for f in files if (tree / f).exists()}
        with open(logs / (patch.stem + ".log"), "w") as log:
            applied = run(["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-r", "-", "-i", str(patch)], tree)
            log.write(applied.stdout + applied.stderr)
            try:
                if applied.returncode != 0:
                    verdict = "does not apply"
                else:
                    built = run(make + make_targets(tests), tree)
                    log.write(built.stdout[-4000:] + built.stderr[-8000:])
                    if built.returncode != 0:
                        verdict = "does not build"
                    else:
                        try:
                            verdict = "SURVIVED" if run_tests(tree, tests, log) else "killed"
                        except subprocess.TimeoutExpired:
                            verdict = "killed"  # a hang is a failure the tests saw
                            log.write(f"\ntests timed out after {TEST_TIMEOUT_S} s\n")
            finally:
                for f, data in saved.items():
                    (tree / f).write_bytes(data)  # a new mtime: the next build recompiles it
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{verdict:15s} {patch.stem:38s} {time.monotonic() - t0:5.0f} s  {behaviour}", flush=True)
    total = len(patches)
    print(f"{counts.get('killed', 0)} of {total} mutants killed"
          + "".join(f", {n} {k}" for k, n in sorted(counts.items()) if k != "killed")
          + f" ({time.monotonic() - t_all:.0f} s; logs in {logs})")
    return 0 if counts.get("killed", 0) == total else 1


if __name__ == "__main__":
    sys.exit(main())
