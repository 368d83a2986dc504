"""The Debian package: built from the binary under test by systemd/packaging/build_deb.sh, its contents
and control fields read back with dpkg-deb, lintian run on it, and the package installed with
dpkg in a scratch root (systemd/packaging/deb_install_check.sh): the user is created, the files and the
conffile land, `sparkd check --config /etc/sparkd/spark.toml` loads the default model, and
`systemd-analyze verify` accepts the installed unit. With SPARKD_ARM64_BIN (the aarch64 build;
`make test-arm64` sets it) the arm64 package is built too and checked the same way, short of
installing it: its contents, its control fields (Architecture arm64), an AArch64 /usr/bin/sparkd
and lintian."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import MODEL, REPO, SPARKD


def version_of(binary):
    out = subprocess.run([str(binary), "version"], capture_output=True, text=True, check=True).stdout
    return re.match(r"sparkd (\S+)", out).group(1)


HOST_ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
ARM64_BIN = os.environ.get("SPARKD_ARM64_BIN")
# The version comes from this machine's build: the aarch64 one may only run under qemu.
PACKAGES = {HOST_ARCH: SPARKD, **({"arm64": Path(ARM64_BIN).resolve()} if ARM64_BIN and HOST_ARCH != "arm64" else {})}
ELF_MACHINE = {"amd64": "Advanced Micro Devices X86-64", "arm64": "AArch64"}


@pytest.fixture(scope="module", params=sorted(PACKAGES))
def deb(request, tmp_path_factory):
    arch = request.param
    binary = PACKAGES[arch]
    if not binary.exists():
        pytest.fail(f"{binary} is missing: `make test-arm64` builds it")
    out = tmp_path_factory.mktemp("deb")
    version = version_of(SPARKD)
    r = subprocess.run(["sh", "systemd/packaging/build_deb.sh", str(binary), arch, version, str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "DEB_COMPRESSION": "gzip"})
    assert r.returncode == 0, r.stderr
    path = out / f"sparkd_{version}_{arch}.deb"
    assert path.exists() and r.stdout.strip() == str(path)
    return path, version, arch


def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb", *map(str, args)], capture_output=True, text=True, check=True).stdout


def test_contents_and_control_fields(deb):
    path, version, arch = deb
    files = {re.sub(r"^\./", "/", line.split()[-1]).rstrip("/") for line in dpkg_deb("--contents", path).splitlines()}
    for f in ("/usr/bin/sparkd", "/etc/sparkd/spark.toml", "/lib/systemd/system/sparkd.service",
              "/var/lib/sparkd/models", "/var/lib/sparkd/cache", "/usr/share/doc/sparkd/README.md.gz",
              "/usr/share/doc/sparkd/copyright", "/usr/share/doc/sparkd/changelog.gz"):
        assert f in files, f
    assert dpkg_deb("-f", path, "Package", "Version", "Architecture").split() == \
        ["Package:", "sparkd", "Version:", version, "Architecture:", arch]
    assert re.search(r"libc6 \(>= 2\.\d+\)", dpkg_deb("-f", path, "Depends"))
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(path)], capture_output=True, check=True).stdout
    listing = subprocess.run(["tar", "-t"], input=control, capture_output=True, check=True).stdout.decode()
    assert {"./conffiles", "./postinst", "./postrm", "./prerm", "./md5sums"} <= set(listing.split())


def test_the_packaged_binary_is_built_for_the_architecture(deb, tmp_path):
    path, _, arch = deb
    dpkg_deb("-x", path, tmp_path)
    header = subprocess.run(["readelf", "-h", str(tmp_path / "usr/bin/sparkd")], capture_output=True, text=True,
                            check=True).stdout
    assert re.search(r"Machine:\s+" + ELF_MACHINE[arch], header), header


def test_lintian_reports_no_errors(deb):
    if not shutil.which("lintian"):
        pytest.fail("lintian is missing: `make deps` installs it")
    r = subprocess.run(["lintian", "--fail-on", "error", str(deb[0])], capture_output=True, text=True, timeout=600)
    errors = [line for line in r.stdout.splitlines() if line.startswith("E:")]
    assert r.returncode == 0 and not errors, r.stdout + r.stderr


def test_installs_and_runs_in_a_scratch_root(deb):
    if deb[2] != HOST_ARCH:
        pytest.skip(f"an {deb[2]} package cannot be installed on this {HOST_ARCH} machine")
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing: run `make model`")
    r = subprocess.run(["sh", "systemd/packaging/deb_install_check.sh", str(deb[0]), str(MODEL.parent)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "install check passed" in r.stdout
