"""The binary is portable: everything but glibc is linked statically (libcuda and cuBLASLt are
loaded at run time), so it starts on any Linux of its architecture with a recent enough glibc.
Checked with the system's own dynamic loader (`ldd`; for a cross-built aarch64 binary, the
aarch64 loader's --list under qemu) and with the ELF NEEDED entries."""
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SPARKD

# glibc's parts, the vDSO and the loader: present on every glibc system.
ALLOWED = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
           "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def binaries():
    """The binary under test, and an aarch64 build beside it when there is one."""
    found = [SPARKD]
    arm64 = Path(os.environ.get("SPARKD_ARM64_BIN", REPO / "build" / "arm64" / "sparkd"))
    if arm64.exists() and arm64.resolve() != SPARKD:
        found.append(arm64.resolve())
    return found


def elf_machine(path):
    out = subprocess.run(["readelf", "-h", str(path)], capture_output=True, text=True, check=True).stdout
    return re.search(r"Machine:\s+(.*)", out).group(1).strip()


def loader_listing(path):
    """What the dynamic loader maps for the binary, as `ldd` prints it."""
    if "AArch64" in elf_machine(path) and platform.machine() != "aarch64":
        if not shutil.which("qemu-aarch64"):
            pytest.fail("an aarch64 binary needs qemu-aarch64 to be listed (make deps-arm64)")
        sysroot = "/usr/aarch64-linux-gnu"
        cmd = ["qemu-aarch64", "-L", sysroot, f"{sysroot}/lib/ld-linux-aarch64.so.1", "--list", str(path)]
    else:
        cmd = ["ldd", str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("binary", binaries(), ids=lambda p: p.parent.name)
def test_loader_maps_only_glibc(binary):
    listing = loader_listing(binary)
    # qemu lists the vDSO as a bare address.
    names = {Path(line.split()[0]).name for line in listing.splitlines() if line.strip() and line.split()[0][0] != "("}
    assert names, listing
    assert names <= ALLOWED, f"{binary} needs {sorted(names - ALLOWED)}:\n{listing}"


@pytest.mark.parametrize("binary", binaries(), ids=lambda p: p.parent.name)
def test_elf_needs_only_glibc(binary):
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", out))
    assert needed and needed <= ALLOWED, f"{binary} NEEDED {sorted(needed - ALLOWED)}"


def test_version_says_target_cuda_and_linking():
    r = subprocess.run([str(SPARKD), "version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    assert re.search(rf"^target: {arch} \(", r.stdout, re.M), r.stdout
    assert re.search(r"^cuda: (built in for sm_\d+|not built \(CPU only\))", r.stdout, re.M), r.stdout
    assert re.search(r"^linked: statically .*cpp-httplib .*OpenSSL.*; dynamically glibc only", r.stdout, re.M), r.stdout
    if "built in" in r.stdout:
        # cuBLASLt is found or named with the version it needs; never a loader error.
        assert re.search(r"^  cuBLASLt (13\.\d+\.\d+: /|: .*cuBLASLt 13\.x)", r.stdout, re.M), r.stdout
