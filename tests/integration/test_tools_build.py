"""Nothing rots: every script under the tool folders (tests/bench, tests/gen, tests/gpu,
tests/mutants, tests/fuzz, systemd/packaging) at least compiles, and the C++ bench programs
that `make test` builds exist. Runs none of them (they are benchmarks and generators)."""
import py_compile
import subprocess

import pytest

from conftest import REPO, SPARKD

FOLDERS = ["tests/bench", "tests/gen", "tests/gpu", "tests/mutants", "tests/fuzz", "systemd/packaging"]
PYTHON = sorted(p for f in FOLDERS for p in (REPO / f).rglob("*.py"))
SHELL = sorted(p for f in FOLDERS for p in (REPO / f).rglob("*.sh"))


@pytest.mark.parametrize("script", PYTHON, ids=[p.relative_to(REPO).as_posix() for p in PYTHON])
def test_python_script_compiles(script, tmp_path):
    py_compile.compile(str(script), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("script", SHELL, ids=[p.relative_to(REPO).as_posix() for p in SHELL])
def test_shell_script_parses(script):
    r = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cpu_bench_is_built():
    # tests/bench/cpu_bench.cpp, linked by the Makefile beside sparkd: a missing binary means
    # `make test` stopped building it (or it no longer compiles).
    exe = SPARKD.parent / "cpu_bench"
    assert exe.exists(), f"{exe} is missing: make builds it from tests/bench/cpu_bench.cpp"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage: cpu_bench" in r.stderr
