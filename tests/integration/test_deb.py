"""The Debian package: built from the binary under test by packaging/build_deb.sh, its contents
and control fields read back with dpkg-deb, lintian run on it, and the package installed with
dpkg in a scratch root (packaging/deb_install_check.sh): the user is created, the files and the
conffile land, `sparkd check --config /etc/sparkd/spark.toml` loads the default model, and
`systemd-analyze verify` accepts the installed unit."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import MODEL, REPO, SPARKD


def version_of(binary):
    out = subprocess.run([str(binary), "version"], capture_output=True, text=True, check=True).stdout
    return re.match(r"sparkd (\S+)", out).group(1)


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    out = tmp_path_factory.mktemp("deb")
    version = version_of(SPARKD)
    r = subprocess.run(["sh", "packaging/build_deb.sh", str(SPARKD), arch, version, str(out)], cwd=REPO,
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


def test_lintian_reports_no_errors(deb):
    if not shutil.which("lintian"):
        pytest.fail("lintian is missing: `make deps` installs it")
    r = subprocess.run(["lintian", "--fail-on", "error", str(deb[0])], capture_output=True, text=True, timeout=600)
    errors = [line for line in r.stdout.splitlines() if line.startswith("E:")]
    assert r.returncode == 0 and not errors, r.stdout + r.stderr


def test_installs_and_runs_in_a_scratch_root(deb):
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing: run `make model`")
    r = subprocess.run(["sh", "packaging/deb_install_check.sh", str(deb[0]), str(MODEL.parent)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "install check passed" in r.stdout
