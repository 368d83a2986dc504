"""The hot CUDA kernels within their register and stack budgets on sm_90 and sm_121
(tests/gpu/kernel_budgets.json), read from the objects the build compiled beside sparkd
(tests/gpu/kernel_report.py); `make kernel-report` prints the whole table."""
import glob
import os
import subprocess
import sys

import pytest

from conftest import REPO, SPARKD

OBJECTS = os.path.join(os.path.dirname(os.path.abspath(SPARKD)), "obj", "engine", "backend", "cuda")


@pytest.mark.skipif(not glob.glob(os.path.join(OBJECTS, "*.cu.o")), reason="sparkd was built without CUDA")
def test_hot_kernels_keep_their_register_and_stack_budgets():
    r = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "kernel_report.py"), "--check", "--objects",
                        OBJECTS], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "kernels budgeted" in r.stdout
