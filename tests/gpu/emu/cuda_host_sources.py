#!/usr/bin/env python3
"""Prints the engine's .cpp files whose code depends on CUDA being real or emulated.

The emulated build reuses the top-level build's objects for the rest of the engine's host
code (it is the same code either way) and compiles only these against the emulator's
headers (emu.mk). A file depends on CUDA when it, or a project header it includes
(transitively), includes a CUDA or NCCL header or tests SPARKD_CUDA or SPARK_CUDA_EMU.
Usage: cuda_host_sources.py ROOT_DIR"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
SYSTEM_CUDA = re.compile(r"^(cuda|cublas|nccl|nvrtc|cufft|curand|driver_types|vector_types)")
MACRO = re.compile(r"\bSPARKD_CUDA\b|\bSPARK_CUDA_EMU\b")


def main(root: pathlib.Path) -> None:
    sources = {p.relative_to(root).as_posix(): p.read_text(errors="replace")
               for p in (root / "engine").rglob("*") if p.suffix in (".cpp", ".h", ".cuh")}
    seeing: dict[str, bool] = {}

    def sees_cuda(name: str, stack: frozenset = frozenset()) -> bool:
        if name in seeing:
            return seeing[name]
        text = sources[name]
        found = bool(MACRO.search(text))
        for kind, target in INCLUDE.findall(text):
            if found:
                break
            if kind == "<":
                found = bool(SYSTEM_CUDA.match(target))
            elif target in sources and target not in stack:
                found = sees_cuda(target, stack | {name})
        seeing[name] = found
        return found

    for name in sorted(n for n in sources if n.endswith(".cpp")):
        if sees_cuda(name):
            print(name)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
