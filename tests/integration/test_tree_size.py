"""The tracked tree stays small: a GPU machine receives the working tree (at most 64 MiB with
what is carried beside it), so the files of `git ls-files` may total at most 40 MiB. Large
fixtures are stored compressed (tests/fixtures, tests/gen/fixture_files.py)."""
import os
import shutil
import subprocess

import pytest

from conftest import REPO

LIMIT_BYTES = 40 * 1024 * 1024


def tracked_files():
    """The paths `git ls-files` lists, or None outside a git checkout."""
    if shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if r.returncode != 0 or os.path.realpath(r.stdout.strip()) != os.path.realpath(REPO):
        return None
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def test_tracked_tree_is_at_most_40_mib(capsys):
    files = tracked_files()
    if files is None:
        pytest.skip(f"{REPO} is not a git checkout: no tracked tree to measure")
    sizes = {}
    for f in files:
        path = REPO / f
        # What `du -cb` counts: a link's own length; a file deleted but still tracked is absent.
        if path.is_symlink() or path.is_file():
            sizes[f] = path.lstat().st_size
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    report = (f"tracked tree: {total:,} bytes ({total / 2**20:.1f} MiB) in {len(sizes)} files, limit "
              f"{LIMIT_BYTES / 2**20:.0f} MiB; largest: " + ", ".join(f"{f} {n / 2**20:.1f} MiB" for f, n in largest))
    with capsys.disabled():
        print("\n" + report)
    assert total <= LIMIT_BYTES, report
