"""golden_gguf.py — the tiny models' llama.cpp-layout GGUF copies, written at test time (and
two folders: qwen3_next_mtp and nemotron_h_mtp, the tiny Qwen3-Next and Nemotron-H with random
MTP heads and their numpy golden logits, tests/gen/gen_qwen3_5_mtp.py and
gen_nemotron_h_mtp.py, kept out of the tracked tree for the same reason).

tests/gen/gen_qwen3_5_gguf.py, gen_qwen3_next_gguf.py, gen_gptoss.py, gguf_gemma3.py and
gguf_gemma4.py write the committed safetensors models tests/golden/models/qwen3_5, qwen3_5_moe,
qwen3_5_moe_mtp, qwen3_next, gpt_oss, gemma3_gguf, gemma4 and gemma4_moe as llama.cpp's
converter writes them. What they write is a function of those models alone
(numpy, safetensors and gguf, all in the build's venv; no torch), the same bytes every time,
so the .gguf files are not committed (the tracked tree's limit,
tests/integration/test_tree_size.py): this module is the one place that writes them, into
build/golden/models/<name>.gguf. A file is rewritten only when it is missing or older than
its source model or a script that writes it; it is written under a temporary name and
renamed, so a reader never sees half a file and two test processes may race. `make` runs it
before the suites (build/golden/models/.stamp) and the Python tests call path(name), which
refreshes the file on demand, so one test file run by hand works too.

SPARKD_GOLDEN_GGUF, when set, names the folder instead: another one is used as is; `make`
sets it to build/golden/models' absolute path for every suite (and refreshes that first).
The C++ tests (tests/unit/test_cpu_forward.cpp, tests/gpu/check_model.cu) read the same
folder: SPARKD_GOLDEN_GGUF, else build/golden/models relative to the repository root.

    python tests/gen/golden_gguf.py [DEST]   refresh build/golden/models (or DEST), print its path
"""
import os
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODELS = REPO / "tests" / "golden" / "models"
PLAIN = REPO / "build" / "golden" / "models"

# file name -> (source model folder, the script that writes it, architecture for gen_qwen3_5_gguf)
FILES = {
    "qwen3_5.gguf": ("qwen3_5", "gen_qwen3_5_gguf", "qwen35"),
    "qwen3_5_moe.gguf": ("qwen3_5_moe", "gen_qwen3_5_gguf", "qwen35moe"),
    "qwen3_5_moe_mtp.gguf": ("qwen3_5_moe_mtp", "gen_qwen3_5_gguf", "qwen35moe"),  # with its MTP block
    "qwen3_next.gguf": ("qwen3_next", "gen_qwen3_next_gguf", None),
    "gpt_oss.gguf": ("gpt_oss", "gen_gptoss", None),
    "gemma3.gguf": ("gemma3_gguf", "gguf_gemma3", None),
    "gemma4.gguf": ("gemma4", "gguf_gemma4", None),
    "gemma4_moe.gguf": ("gemma4_moe", "gguf_gemma4", None),
    "qwen3_next_mtp": ("qwen3_next", "gen_qwen3_5_mtp", None),  # a folder
    "nemotron_h_mtp": ("nemotron_h_latent", "gen_nemotron_h_mtp", None),  # a folder
}


def _inputs(name):
    """The files whose change makes `name` stale: its source model and the scripts writing it
    (gen_qwen3_next_gguf takes its helpers from gen_qwen3_5_gguf, gguf_gemma3 its reader from
    gguf_pooling and its attention keys from gen_qwen3_5_gguf)."""
    src, script, _ = FILES[name]
    helpers = {"gen_qwen3_next_gguf": {"gen_qwen3_5_gguf"}, "gguf_gemma3": {"gguf_pooling", "gen_qwen3_5_gguf"},
               "gguf_gemma4": {"gguf_gemma3", "gguf_pooling", "gen_qwen3_5_gguf"},
               "gen_nemotron_h_mtp": {"gen_qwen3_5_mtp"}}
    scripts = {script} | helpers.get(script, set())
    return ([MODELS / src / "config.json", MODELS / src / "model.safetensors"]
            + [HERE / f"{s}.py" for s in sorted(scripts)])


def _write(name, out):
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    src, script, arch = FILES[name]
    if script == "gen_qwen3_5_gguf":
        import gen_qwen3_5_gguf
        gen_qwen3_5_gguf.write(str(MODELS / src), str(out), arch)
    elif script == "gen_qwen3_next_gguf":
        import gen_qwen3_next_gguf
        gen_qwen3_next_gguf.write(str(MODELS / src), str(out))
    elif script == "gguf_gemma3":
        import gguf_gemma3
        gguf_gemma3.write(str(MODELS / src), str(out))
    elif script == "gguf_gemma4":
        import gguf_gemma4
        gguf_gemma4.write(str(MODELS / src), str(out))
    elif script == "gen_qwen3_5_mtp":
        import gen_qwen3_5_mtp
        gen_qwen3_5_mtp.write_head(str(MODELS / src), str(out), quiet=True)
    elif script == "gen_nemotron_h_mtp":
        import gen_nemotron_h_mtp
        gen_nemotron_h_mtp.write_head(str(MODELS / src), str(out), quiet=True)
    else:
        import gen_gptoss
        gen_gptoss.write_gguf_from_checkpoint(str(MODELS / src), str(out))


def materialize(dst=PLAIN, names=None):
    """Brings the files `names` (all by default) in `dst` up to date and returns `dst`."""
    dst = pathlib.Path(dst)
    for name in names or FILES:
        out = dst / name
        folder = not name.endswith(".gguf")
        done = out / "mtp_golden.json" if folder else out  # a folder's last file written
        if done.is_file():
            mtime = done.stat().st_mtime_ns
            if all(p.stat().st_mtime_ns <= mtime for p in _inputs(name)):
                continue
        dst.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            _write(name, tmp)
            if folder and out.is_dir():
                shutil.rmtree(out, ignore_errors=True)
            try:
                os.replace(tmp, out)
            except OSError:
                if not (folder and done.is_file()):  # else another process put a fresh one there
                    raise
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
    return dst


_fresh = set()  # the files this process has brought up to date


def golden_gguf_dir():
    """The folder of the GGUF copies: SPARKD_GOLDEN_GGUF, else build/golden/models."""
    env = os.environ.get("SPARKD_GOLDEN_GGUF")
    return pathlib.Path(env) if env else PLAIN


def path(name):
    """The GGUF copy (or folder) `name` (a key of FILES, e.g. "qwen3_5_moe.gguf"), written or refreshed
    first (once per process) when the folder is build/golden/models."""
    if name not in FILES:
        raise KeyError(f"{name}: not one of {', '.join(FILES)}")
    dst = golden_gguf_dir()
    if dst.resolve() == PLAIN.resolve() and name not in _fresh:
        materialize(PLAIN, [name])
        _fresh.add(name)
    return dst / name


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit("usage: golden_gguf.py [DEST]   (DEST defaults to build/golden/models)")
    print(materialize(pathlib.Path(sys.argv[1]) if len(sys.argv) == 2 else PLAIN))
