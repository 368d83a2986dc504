"""fixture_files.py — where the tests find the real tokenizer files of tests/fixtures.

The large files there are stored xz-compressed (tokenizers/<name>/tokenizer.json.xz) to keep
the tracked tree small. The tests read plain files from one copy, build/fixtures: every file
of tests/fixtures, the *.xz ones decompressed (name without .xz). This module is the one place
that makes that copy; `make` runs it (build/fixtures/.stamp) and the Python tests call
fixtures_dir(), which refreshes it on demand, so one test file run by hand works too.

SPARKD_FIXTURES, when set, names the folder of plain files instead: another one is used as
is; `make` sets it to build/fixtures' absolute path for every suite (and refreshes that first).

    python3 tests/gen/fixture_files.py     refresh build/fixtures and print its path
"""
import lzma
import os
import pathlib
import shutil
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "fixtures"
PLAIN = REPO / "build" / "fixtures"
COMPRESSED_SUFFIX = ".xz"


def plain_name(rel: pathlib.PurePath) -> pathlib.PurePath:
    """The name a stored file has in the plain copy."""
    return rel.with_suffix("") if rel.suffix == COMPRESSED_SUFFIX else rel


def materialize(dst: pathlib.Path = PLAIN) -> pathlib.Path:
    """Brings `dst` up to date with tests/fixtures and returns it. A file is rewritten only when
    its copy is missing or carries another modification time than its source; each is written
    to a temporary name and renamed, so a reader never sees half a file."""
    wanted = set()
    for src in sorted(p for p in SOURCE.rglob("*") if p.is_file()):
        rel = plain_name(src.relative_to(SOURCE))
        wanted.add(rel)
        out = dst / rel
        st = src.stat()
        if out.is_file() and out.stat().st_mtime_ns == st.st_mtime_ns:
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        opener = lzma.open if src.suffix == COMPRESSED_SUFFIX else open
        with opener(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, out)
    # Files whose source is gone (renamed or deleted fixtures) leave the copy too.
    for old in sorted((p for p in dst.rglob("*") if p.is_file()), reverse=True):
        rel = old.relative_to(dst)
        if rel not in wanted and rel.name != ".stamp" and not rel.name.endswith(".tmp"):
            old.unlink()
    return dst


_fresh = set()  # the copies this process has brought up to date


def fixtures_dir() -> pathlib.Path:
    """The folder of plain fixture files: SPARKD_FIXTURES, else build/fixtures (brought up to
    date once per process, as it is when SPARKD_FIXTURES names it)."""
    env = os.environ.get("SPARKD_FIXTURES")
    dst = pathlib.Path(env) if env else PLAIN
    if dst.resolve() == PLAIN.resolve() and PLAIN not in _fresh:
        materialize(PLAIN)
        _fresh.add(PLAIN)
    return dst


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit("usage: fixture_files.py [DEST]   (DEST defaults to build/fixtures)")
    print(materialize(pathlib.Path(sys.argv[1]) if len(sys.argv) == 2 else PLAIN))
