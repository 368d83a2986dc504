"""The source tree's layering: no #include runs upward, and tensor names live in the
model description alone. Reads the sources; runs no binary."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Lower ranks are included by higher ones, never the other way. Folders of one rank do
# not include each other, except where ALLOWED_SIDEWAYS says so.
RANKS = {
    "engine/util": 0,
    "engine/config": 1,
    "engine/step": 1,
    "engine/model": 2,
    "engine/tokenizer": 3,  # reads a GGUF file's vocabulary through the model side's reader
    "engine/template": 4,   # chat templates in the Jinja engine (UTF-8 helpers from the tokenizer)
    "engine/backend": 4,
    "engine/constrain": 4,
    "engine/core": 5,
    "engine/peer": 6,
    "engine/commands": 7,
    "web": 8,
    "main": 9,
}
ALLOWED_SIDEWAYS = set()
# What the engine core sees of the backends: the interface, not an implementation.
CORE_MAY_INCLUDE_FROM_BACKEND = {"engine/backend/backend.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


def module_of(path: str) -> str | None:
    parts = path.split("/")
    if parts[0] == "main.cpp":
        return "main"
    if parts[0] == "web":
        return "web"
    if parts[0] != "engine" or len(parts) < 2:
        return None
    if len(parts) == 2:  # engine/config.h, engine/config_location.h
        return "engine/" + parts[1].split(".")[0].split("_")[0]
    return "engine/" + parts[1]


def source_files():
    files = [ROOT / "main.cpp"]
    for top in ("engine", "web"):
        for pattern in SOURCES:
            files.extend((ROOT / top).rglob(pattern))
    return sorted(files)


def upward_includes():
    bad = []
    for f in source_files():
        rel = f.relative_to(ROOT).as_posix()
        src = module_of(rel)
        for target in INCLUDE.findall(f.read_text(errors="replace")):
            dst = module_of(target)
            if src is None or dst is None or dst == src:
                continue
            if src == "engine/core" and dst == "engine/backend":
                if target not in CORE_MAY_INCLUDE_FROM_BACKEND:
                    bad.append(f"{rel}: {target} (core sees the Backend interface only)")
                continue
            if (src, dst) in ALLOWED_SIDEWAYS:
                continue
            if dst not in RANKS or src not in RANKS:
                bad.append(f"{rel}: {target} (folder without a rank: add it to RANKS)")
            elif RANKS[dst] >= RANKS[src]:
                bad.append(f"{rel}: {target} ({src} may not include {dst})")
    return bad


def test_no_include_runs_upward():
    bad = upward_includes()
    assert not bad, "includes that run upward:\n" + "\n".join(bad)


def test_the_checker_sees_an_upward_include(tmp_path, monkeypatch):
    # The same walk over a copy of one file with an upward include must complain.
    fake = tmp_path / "engine" / "model"
    fake.mkdir(parents=True)
    (fake / "x.cpp").write_text('#include "engine/backend/cuda/cuda_backend.h"\n#include "engine/util/check.h"\n')
    (tmp_path / "main.cpp").write_text("")
    (tmp_path / "web").mkdir()
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert upward_includes() == ["engine/model/x.cpp: engine/backend/cuda/cuda_backend.h "
                                 "(engine/model may not include engine/backend)"]


# Hugging Face tensor-name fragments: they belong in the model description alone, the
# shared table (engine/model/arch.cpp) and the architecture files (engine/model/arch/).
TENSOR_NAME = re.compile(r"_proj|layernorm|embed_tokens|lm_head|q_norm|k_norm|mlp\.|self_attn|attn_q|attn_k|attn_v|"
                         r"attn_output|ffn_gate|ffn_up|ffn_down|token_embd|output_norm")
STRING_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


@pytest.mark.parametrize("folder", ["engine/backend", "engine/core", "engine/peer", "engine/commands", "web",
                                    "engine/model"])
def test_tensor_names_live_in_the_model_description(folder):
    hits = []
    for f in source_files():
        rel = f.relative_to(ROOT).as_posix()
        if not rel.startswith(folder + "/") or is_model_description(rel):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if line.lstrip().startswith("//"):
                continue
            if any(TENSOR_NAME.search(text) for text in STRING_LITERAL.findall(line)):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "tensor names outside engine/model/arch.cpp and engine/model/arch/:\n" + "\n".join(hits)


def is_model_description(rel):
    return rel == "engine/model/arch.cpp" or rel.startswith("engine/model/arch/")


# An architecture is asked about only in its own file: its class name appears nowhere
# else, so nothing outside engine/model/arch/ can switch on it.
ARCHITECTURE_NAME = re.compile(r"ForCausalLM|ForConditionalGeneration")


def test_architectures_are_named_only_in_their_own_files():
    hits = []
    for f in source_files():
        rel = f.relative_to(ROOT).as_posix()
        if not rel.startswith(("engine/", "web/", "main.cpp")) or rel.startswith("engine/model/arch/"):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            code = line.split("//", 1)[0]
            if any(ARCHITECTURE_NAME.search(text) for text in STRING_LITERAL.findall(code)):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "architecture names outside engine/model/arch/:\n" + "\n".join(hits)


# DESIGN.md's top level: nothing else is tracked there (dotfiles aside).
TOP_LEVEL = {"Makefile", "main.cpp", "spark.toml", "engine", "web", "assets", "systemd", "tests", "README.md"}


def test_top_level_holds_the_design_entries():
    import subprocess
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout: " + r.stderr.strip())
    entries = {line.split("/", 1)[0] for line in r.stdout.splitlines() if not line.startswith(".")}
    assert entries == TOP_LEVEL, f"unexpected: {sorted(entries - TOP_LEVEL)}, missing: {sorted(TOP_LEVEL - entries)}"
