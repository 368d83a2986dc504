#!/usr/bin/env python3
"""The CUDA kernels' resources as the compiler left them, read from the built objects
(build/obj/engine/backend/cuda/*.cu.o) with cuobjdump: for each hot kernel on each
architecture the build targets (sm_90, H100/H200; sm_121, GB10), its registers per thread,
stack frame (spilled registers and local arrays) and local memory, static shared memory,
and the warps an SM can keep resident as far as registers allow; and, from the SASS
(nvdisasm) of decode_probe.cu compiled apart with nvcc, the instructions and int-to-float
conversions (I2F: the slow conversion) each decode reader takes a weight.

tests/gpu/kernel_budgets.json gives each hot kernel family a budget: at most that many
registers and that many stack bytes a thread, no local memory; and each decode reader at
most that many instructions a weight, no I2F. --check exits 1 naming every kernel or reader
over its budget (tests/integration/test_kernel_budgets.py runs it); without it the
report only prints. cuobjdump and nvdisasm come from the CUDA toolkit, or from the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (tests/requirements.txt).

Resident warps from registers: an SM holds 65,536 registers, given to warps in units of
256 (a thread's count rounded up to a multiple of 8), up to 64 warps on sm_90 and 48 on
sm_121. Block size and dynamic shared memory, which the launch sets, can lower it further;
the static shared memory is printed beside it.

usage: kernel_report.py [--check] [--objects DIR]   (make kernel-report)
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUDGETS = os.path.join(HERE, "kernel_budgets.json")
PROBE = os.path.join(HERE, "decode_probe.cu")
REGISTERS_PER_SM = 65536
MAX_WARPS = {"sm_90": 64, "sm_121": 48}


def find_tool(name):
    """name (cuobjdump, nvdisasm) on PATH, in the CUDA toolkit, or from the venv's wheel."""
    candidates = [shutil.which(name), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name)]
    candidates += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu*", "bin", name))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def short_name(demangled):
    """A kernel's demangled name without its namespace noise and argument list."""
    text = demangled.replace("(anonymous namespace)::", "").replace("spark::cuda::", "").removeprefix("void ")
    depth = 0
    for i in range(len(text) - 1, -1, -1):  # the argument list: the last parenthesis and its match
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0 and text[i] == "(":
            return text[:i]
    return text


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def resident_warps(registers, arch):
    per_warp = -(-registers * 32 // 256) * 256
    return min(MAX_WARPS[arch], REGISTERS_PER_SM // per_warp)


def resources(cuobjdump, obj):
    """[(arch, mangled name, {REG, STACK, SHARED, LOCAL})] of every kernel in obj."""
    text = subprocess.run([cuobjdump, "--dump-resource-usage", obj], capture_output=True, text=True,
                          check=True).stdout
    out, arch, name = [], None, None
    for line in text.splitlines():
        if m := re.match(r"arch = (sm_\d+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function (\S+):", line):
            name = m.group(1)
        elif "REG:" in line and arch in MAX_WARPS and name:
            out.append((arch, name, {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}))
    return out


def sass_counts(cuobjdump, nvdisasm, obj, arch):
    """{mangled name: (instructions, I2F instructions)} from obj's SASS for arch (the NOPs
    that pad a function's end not counted)."""
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(nvdisasm))
    text = subprocess.run([cuobjdump, "-sass", "-arch", arch, obj], capture_output=True, text=True, env=env,
                          check=True).stdout
    counts, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            name = m.group(1)
            counts[name] = [0, 0]
        elif name and re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+\S", line) and not re.search(r"\bNOP\b", line):
            counts[name][0] += 1
            counts[name][1] += bool(re.search(r"\bI2F(\.|\s)", line))
    return {k: tuple(v) for k, v in counts.items()}


def reader_costs(cuobjdump, nvdisasm, arch):
    """{reader: (instructions, I2F) a weight} on arch, from decode_probe.cu compiled apart:
    its N = 2 kernel less its N = 1 kernel is one chunk's loads, decode and one FMA a weight."""
    nvcc = find_tool("nvcc")
    if not nvcc:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "decode_probe.o")
        number = arch.removeprefix("sm_")
        subprocess.run([nvcc, "-O3", "-std=c++20", "-I", REPO, "-DSPARKD_CUDA=1", "--expt-relaxed-constexpr",
                        f"-gencode=arch=compute_{number},code={arch}", "-c", PROBE, "-o", obj],
                       check=True, capture_output=True, text=True)
        counts = sass_counts(cuobjdump, nvdisasm, obj, arch)
    kernels = {}
    for text, (total, i2f) in zip(demangle(list(counts)), counts.values()):
        if m := re.search(r"decode_probe<(.+), (\d)>\(", short_name(text) + "("):
            kernels[(m.group(1), int(m.group(2)))] = (total, i2f)
    return kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--objects", default=os.path.join(REPO, "build", "obj", "engine", "backend", "cuda"))
    args = ap.parse_args()
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    objects = sorted(glob.glob(os.path.join(args.objects, "*.cu.o")))
    if not cuobjdump or not nvdisasm or not objects:
        print("kernel report: " + ("no CUDA objects in " + args.objects if objects == [] else "no cuobjdump or nvdisasm"))
        return 2
    with open(BUDGETS) as f:
        budgets = json.load(f)
    kernels = []  # (arch, object, mangled, resources)
    for obj in objects:
        kernels += [(arch, obj, name, r) for arch, name, r in resources(cuobjdump, obj)]
    readable = dict(zip([k[2] for k in kernels], demangle([k[2] for k in kernels])))
    over, seen = [], set()
    print(f"{'arch':7} {'kernel':70} {'regs':>4} {'budget':>6} {'stack':>5} {'smem':>6} {'warps/SM':>8}")
    for family in budgets["kernels"]:
        pattern = re.compile(family["match"])
        matched = [k for k in kernels if pattern.search(readable[k[2]])]
        if not matched:
            over.append(f"{family['match']}: no kernel matches (renamed?)")
        for arch, obj, name, r in sorted(matched, key=lambda k: (k[0], -k[3]["REG"])):
            seen.add((arch, name))
            warps = resident_warps(r["REG"], arch)
            short = short_name(readable[name])
            print(f"{arch:7} {short[:70]:70} {r['REG']:4} {family['max_registers']:6} {r['STACK']:5} "
                  f"{r['SHARED']:6} {warps:8}")
            if r["REG"] > family["max_registers"]:
                over.append(f"{arch} {short}: {r['REG']} registers, budget {family['max_registers']}")
            if r["STACK"] > family.get("max_stack_bytes", 0) or r["LOCAL"] > 0:
                over.append(f"{arch} {short}: a stack frame of {r['STACK']} bytes (budget "
                            f"{family.get('max_stack_bytes', 0)}) and {r['LOCAL']} bytes of local memory")
    print(f"\n{len(seen)} kernels budgeted of {len(kernels)} ({len(objects)} objects); what each family is: "
          f"{BUDGETS}")
    print("\ndecode readers (decode_probe.cu): SASS instructions a weight to load, decode and multiply "
          "(less its one FMA), I2F conversions a weight, budget")
    for arch in MAX_WARPS:
        kernels = reader_costs(cuobjdump, nvdisasm, arch)
        if kernels is None:
            print("  no nvcc: not measured")
            break
        for reader in budgets["decode_readers"]:
            one, two = kernels.get((reader["reader"], 1)), kernels.get((reader["reader"], 2))
            if not one or not two:
                over.append(f"decode reader {reader['reader']}: no probe kernel (renamed?)")
                continue
            per_weight = (two[0] - one[0]) / reader["values"] - 1
            i2f = (two[1] - one[1]) / reader["values"]
            name = reader["reader"] + (f" ({reader['what']})" if "what" in reader else "")
            print(f"  {arch:7} {name:40} {per_weight:6.2f} {i2f:5.2f} {reader['max_per_weight']:6}")
            if per_weight > reader["max_per_weight"] or (i2f > 0 and not reader.get("i2f", False)):
                over.append(f"{arch} decode reader {reader['reader']}: {per_weight:.2f} instructions a weight "
                            f"(budget {reader['max_per_weight']}), {i2f:.2f} I2F")
    if over:
        print("\nover budget:\n  " + "\n  ".join(over))
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
