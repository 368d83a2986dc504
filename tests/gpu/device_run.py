#!/usr/bin/env python3
"""device_run.py — the whole GPU table in one command, inside a lent GPU machine's limits.

    python3 tests/gpu/device_run.py BUNDLE [--out DIR] [--budget SECONDS] [--dry-run] [--checks NAMES]

Run it from the repository root: the checks read tests/golden/ and the serving benchmark
reads the tokenizer fixtures, which travel with the tree. BUNDLE is the archive
`make gpu-bundle` writes (tests/gpu/make_bundle.sh): sparkd, the one executable holding
every GPU check, and the shared libraries a bare machine lacks. Only the Python standard
library is used, since the GPU machine has no packages of ours.

The run is split into parts, each with a budget in seconds, all inside --budget (480 by
default: 8 minutes of a 10-minute command). A part that runs long is cut where it stands;
what it finished is kept and a SKIP row names the budget, so the run always ends in time
with every finished row written:
  device   what the machine is (nvidia-smi) and what the bundle was built for;
  checks   every check program: kernels against the CPU reference, then the model-sized
           decode and prefill benchmarks (check_moe, check_gptoss_moe, check_model);
  compass  beside each measured batch-1 decode rate, the rate `sparkd check` projects for
           the same shape: once with the h100 preset (sparkd's model of the hardware, made
           with no GPU) and once with the copy bandwidth this run measured (its model of
           the bytes a token reads), so the table shows at once which of the two was wrong;
  serve    `sparkd serve` on the GPU with the Llama-3.1-8B-shaped dummy and `sparkd bench`
           at concurrency 1, 16 and 64 (output tok/s, TTFT and TPOT p50 / p99);
  smollm2  SmolLM2's greedy text on the GPU against the CPU backend, when models/ holds it.

--dry-run rehearses the same run without a GPU (`make test` does, with an emulated bundle):
the checks run on the CUDA emulator (tiny shapes; the benchmarks print SKIP rows), the
compass projects with the h100 preset only, and serve and smollm2 are skipped with their
reason, so the bundle's layout, this command and the result files cannot rot unseen.

Results, in DIR ($OUT when set, else build/gpu-run): gpu_table.txt (the table),
gpu_rows.json (every row, the parts, the machine; schema "sparkd-gpu-run/1") and
gpu_logs.tar.xz (each program's whole output). Exit status: 0 when no row failed, 1 when
one did, 2 for a usage error or an unreadable bundle.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

SCHEMA = "sparkd-gpu-run/1"
RESULTS = ("PASS", "FAIL", "INFO", "SKIP")
# Seconds per part; each is also capped by what is left of the whole run's budget.
PART_BUDGETS = {"device": 10, "checks": 300, "compass": 20, "serve": 130, "smollm2": 30}
# One program may not take the whole checks part: a hang in one leaves time for the rest.
PROGRAM_CAP_S = 240
# Kernel checks first; the programs that also hold the model-sized benchmarks last.
LAST_CHECKS = ("check_moe", "check_gptoss_moe", "check_model")
SMOLLM2 = pathlib.Path("models/SmolLM2-135M-Instruct.Q4_1.gguf")
# The measured batch-1 decode rows and the config each one's shape comes from.
COMPASS = [
    ("llama3_8b", re.compile(r"^8B bf16 decode b=1 ctx 512: ([0-9.]+) ms$"), "ms"),
    ("qwen3_30b_a3b", re.compile(r"^30B-A3B BF16 decode b=1$"), "tok/s"),
    ("gpt_oss_20b", re.compile(r"^gpt-oss-20b MXFP4 experts, BF16 attention and head decode b=1$"), "tok/s"),
]


class Run:
    def __init__(self, out, budget_s, dry_run):
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
        self.budget_s = budget_s
        self.dry_run = dry_run
        self.rows = []
        self.parts = []
        self.device = {}
        self.budget_text = ""  # the running part's budget, for its SKIP rows

    def left(self):
        return self.deadline - time.monotonic()

    def row(self, part, check, what, measured, limit, result):
        assert result in RESULTS, result
        self.rows.append({"part": part, "check": check, "what": what, "measured": measured,
                          "limit": limit, "result": result})

    def part(self, name, fn, *args):
        budget = max(0.0, min(PART_BUDGETS[name], self.left()))
        began = time.monotonic()
        self.budget_text = f"the {name} part's budget of {budget:.0f} s"
        print(f"== {name} (budget {budget:.0f} s)", file=sys.stderr, flush=True)
        cut = False
        if budget < 1:
            self.row(name, name, "not run", "-", f"the run's budget of {self.budget_s:.0f} s was spent", "SKIP")
            cut = True
        else:
            try:
                cut = bool(fn(began + budget, *args))
            except Exception as e:  # a broken part is a failed row, and the run goes on
                self.row(name, name, "part raised", f"{type(e).__name__}: {e}", "-", "FAIL")
        wall = time.monotonic() - began
        self.parts.append({"name": name, "budget_s": round(budget, 1), "wall_s": round(wall, 1), "cut": cut})
        print(f"== {name} done in {wall:.0f} s", file=sys.stderr, flush=True)


def run_program(cmd, log, until, env=None):
    """Runs cmd until the deadline; returns (exit status or None when cut, output)."""
    timeout = max(1.0, until - time.monotonic())
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    return rc, pathlib.Path(log).read_text(errors="replace")


def bundle_env(bundle):
    env = dict(os.environ)
    cuda_lib = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64"
    libs = [str(bundle / "lib")] + ([str(cuda_lib)] if cuda_lib.is_dir() else [])
    env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    if (bundle / "golden").is_dir():  # the tiny models' GGUF copies, written at test time (tests/gen/golden_gguf.py)
        env["SPARKD_GOLDEN_GGUF"] = str(bundle / "golden")
    return env


# ---- parts ---------------------------------------------------------------------------

def part_device(until, run, bundle, manifest):
    for key in ("built_for", "git_rev", "built_utc"):
        run.row("device", "bundle", key, str(manifest.get(key, "-")), "-", "INFO")
    if run.dry_run:
        run.row("device", "device", "GPU", "none: a dry run on the CUDA emulator", "-", "INFO")
        return False
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem",
             "--format=csv,noheader"]
    try:
        text = subprocess.run(query, capture_output=True, text=True, timeout=max(1, until - time.monotonic())).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        run.row("device", "device", "nvidia-smi", f"{type(e).__name__}: {e}", "-", "FAIL")
        return False
    fields = [f.strip() for f in text.strip().splitlines()[0].split(",")] if text.strip() else []
    if len(fields) < 3:
        run.row("device", "device", "nvidia-smi", text.strip() or "no GPU listed", "-", "FAIL")
        return False
    run.device = {"name": fields[0], "memory": fields[1], "driver": fields[2]}
    for label, value in zip(("name", "memory", "driver", "max SM clock", "max memory clock"), fields):
        run.row("device", "device", label, value, "-", "INFO")
    return False


def part_checks(until, run, bundle, names):
    env = bundle_env(bundle)
    env["GPU_CHECK_MODELS"] = "optional"  # models/ (SmolLM2, 98 MB) rarely travels: its rows skip
    cut = False
    for i, name in enumerate(names):
        left = until - time.monotonic()
        if left < 5:
            for rest in names[i:]:
                run.row("checks", rest, "not run", "-", f"{run.budget_text} was spent", "SKIP")
            return True
        log = run.logs / f"{name}.log"
        began = time.monotonic()
        rc, text = run_program([str(bundle / "bin" / name)], log, min(until, began + PROGRAM_CAP_S), env=env)
        wall = time.monotonic() - began
        rows = [line.split("|") for line in text.splitlines() if line.startswith("ROW|")]
        for r in rows:
            if len(r) == 6 and r[5] in RESULTS:
                run.row("checks", r[1], r[2], r[3], r[4], r[5])
            else:
                run.row("checks", name, "malformed row", "|".join(r)[:200], "-", "FAIL")
        if rc is None:
            cap = f"a program's cap of {PROGRAM_CAP_S} s" if began + PROGRAM_CAP_S < until else run.budget_text
            run.row("checks", name, "cut", f"after {wall:.0f} s, {len(rows)} rows", f"{cap}: see logs/{name}.log", "SKIP")
            cut = True
        elif rc != 0 and not any(len(r) == 6 and r[5] == "FAIL" for r in rows):
            run.row("checks", name, f"exited with status {rc}", f"after {len(rows)} rows", f"see logs/{name}.log", "FAIL")
        print(f"   {name}: {len(rows)} rows in {wall:.0f} s", file=sys.stderr, flush=True)
    return cut


def projected_rate(bundle, config, device, until):
    """The batch-1 decode rate `sparkd check` projects for a config's dummy on a device."""
    cmd = [str(bundle / "bin" / "sparkd"), "check", "--model", f"tests/golden/configs/{config}",
           "--set", "model.load_format=dummy", "--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True, env=bundle_env(bundle),
                       timeout=max(1, until - time.monotonic()))
    m = re.search(r"decode \(proj\.\)\s+~([0-9.]+) tokens/s at batch 1", p.stdout)
    if not m:
        raise RuntimeError(f"sparkd check {config} --device {device} printed no projection (exit {p.returncode}): "
                           f"{(p.stdout + p.stderr).strip()[-300:]}")
    return float(m.group(1))


def measured_rate(run, pattern, unit):
    for r in run.rows:
        m = pattern.match(r["what"])
        if m and r["result"] in ("INFO", "PASS", "FAIL"):
            if unit == "ms":
                return 1e3 / float(m.group(1))
            tok = re.match(r"([0-9.]+) tok/s", r["measured"])
            if tok:
                return float(tok.group(1))
    return None


def part_compass(until, run, bundle):
    copy = next((r["measured"] for r in run.rows if r["what"] == "device copy bandwidth (read+write)"
                 and re.match(r"[0-9.]+ GB/s", r["measured"])), None)
    memory_gib = None
    m = re.match(r"([0-9.]+) MiB", run.device.get("memory", ""))
    if m:
        memory_gib = float(m.group(1)) / 1024
    for config, pattern, unit in COMPASS:
        measured = measured_rate(run, pattern, unit)
        preset = projected_rate(bundle, config, "h100", until)
        shown = f"{measured:.0f} tok/s" if measured else "-"
        ratio = f"measured / projected {measured / preset:.2f}" if measured else "no measured row"
        run.row("compass", config, "b=1 decode vs sparkd check --device h100 (3.0 TB/s)", shown,
                f"~{preset:.0f} tok/s projected; {ratio}", "INFO")
        if copy and memory_gib:
            gbs = float(copy.split()[0])
            own = projected_rate(bundle, config, f"{memory_gib:.0f},{gbs:.0f}", until)
            ratio = f"measured / projected {measured / own:.2f}" if measured else "no measured row"
            run.row("compass", config, f"b=1 decode vs sparkd check at this run's copy {gbs:.0f} GB/s", shown,
                    f"~{own:.0f} tok/s projected; {ratio}", "INFO")
        else:
            run.row("compass", config, "b=1 decode vs this run's copy bandwidth", "-",
                    "no copy bandwidth measured" + (" (dry run)" if run.dry_run else ""), "SKIP")
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def part_serve(until, run, bundle):
    if run.dry_run:
        run.row("serve", "serve", "8B dummy, bench c=1, 16, 64", "-", "dry run: no GPU (an 8B model on the emulator takes hours)", "SKIP")
        return False
    sys.path.insert(0, str(pathlib.Path("tests/gen").resolve()))
    import fixture_files  # stdlib only: the plain copy of the tokenizer fixtures
    tokenizer = fixture_files.fixtures_dir() / "tokenizers" / "llama3_1"
    port = free_port()
    sparkd = str(bundle / "bin" / "sparkd")
    env = bundle_env(bundle)
    cmd = [sparkd, "serve", "--config", "spark.toml", "--set", "model.path=tests/golden/configs/llama3_8b",
           "--set", "model.load_format=dummy", "--set", f"model.tokenizer={tokenizer}", "--set", "engine.backend=cuda",
           "--set", "model.max_model_len=4096", "--set", "engine.max_num_seqs=64", "--set", f"server.port={port}",
           "--set", "server.dashboard=false"]
    log = open(run.logs / "serve.log", "wb")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while True:
            if time.monotonic() > until - 10 or server.poll() is not None:
                why = "exited" if server.poll() is not None else "was not ready within the serve budget"
                run.row("serve", "serve", "sparkd serve", why, "see logs/serve.log", "FAIL" if server.poll() is not None else "SKIP")
                return True
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        for concurrency, prompts in ((1, 8), (16, 48), (64, 128)):
            if until - time.monotonic() < 10:
                run.row("serve", "serve", f"bench c={concurrency}", "-", f"{run.budget_text} was spent", "SKIP")
                continue
            report = run.logs / f"bench_c{concurrency}.json"
            rc, text = run_program([sparkd, "bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", str(concurrency),
                                    "--num-prompts", str(prompts), "--input-len", "512", "--output-len", "128",
                                    "--json", str(report)], run.logs / f"bench_c{concurrency}.log", until, env=env)
            if rc != 0 or not report.exists():
                run.row("serve", "serve", f"bench c={concurrency}", "cut" if rc is None else f"exit {rc}",
                        f"see logs/bench_c{concurrency}.log", "SKIP" if rc is None else "FAIL")
                continue
            s = json.loads(report.read_text())["summary"]
            run.row("serve", "serve", f"8B bf16 bench c={concurrency}, 512 in / 128 out",
                    f"{s['output_throughput']:.0f} output tok/s",
                    f"TTFT p50 {s['ttft_ms']['p50']:.0f} / p99 {s['ttft_ms']['p99']:.0f} ms; "
                    f"TPOT p50 {s['tpot_ms']['p50']:.1f} / p99 {s['tpot_ms']['p99']:.1f} ms; {s['failed']} failed",
                    "FAIL" if s["failed"] else "INFO")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    return False


def part_smollm2(until, run, bundle):
    if run.dry_run:
        run.row("smollm2", "smollm2", "greedy text, cuda vs cpu", "-", "dry run: no GPU", "SKIP")
        return False
    if not SMOLLM2.exists():
        run.row("smollm2", "smollm2", "greedy text, cuda vs cpu", "-",
                f"{SMOLLM2} is not here (98 MB: over what travels; carry models/ to run it)", "SKIP")
        return False
    texts = {}
    for backend in ("cuda", "cpu"):
        rc, text = run_program([str(bundle / "bin" / "sparkd"), "generate", "--model", str(SMOLLM2), "--prompt",
                                "The three primary colours are", "--max-tokens", "32", "--temperature", "0", "--ids",
                                "--set", f"engine.backend={backend}"], run.logs / f"smollm2_{backend}.log", until,
                               env=bundle_env(bundle))
        if rc != 0:
            run.row("smollm2", "smollm2", f"generate on {backend}", "cut" if rc is None else f"exit {rc}",
                    f"see logs/smollm2_{backend}.log", "SKIP" if rc is None else "FAIL")
            return rc is None
        texts[backend] = text.strip().splitlines()[-1] if text.strip() else ""
    same = texts["cuda"] == texts["cpu"]
    run.row("smollm2", "smollm2", "greedy 32 token ids, cuda == cpu", texts["cuda"][:120], "identical to the CPU's",
            "PASS" if same else "FAIL")
    return False


# ---- results -------------------------------------------------------------------------

def table(run):
    lines = [f"{'part':<8} {'check':<16} {'case':<58} {'measured':<34} {'limit / reference':<52} result"]
    for r in run.rows:
        lines.append(f"{r['part']:<8} {r['check']:<16} {r['what']:<58} {r['measured']:<34} {r['limit']:<52} {r['result']}")
    counts = {k: sum(r["result"] == k for r in run.rows) for k in RESULTS}
    lines.append(f"gpu-run{' (dry run)' if run.dry_run else ''}: {counts['PASS']} passed, {counts['FAIL']} failed, "
                 f"{counts['SKIP']} skipped, {counts['INFO']} measurements, in {time.monotonic() - run.start:.0f} s "
                 f"of a {run.budget_s:.0f} s budget")
    return "\n".join(lines) + "\n"


def write_results(run, manifest):
    counts = {k: sum(r["result"] == k for r in run.rows) for k in RESULTS}
    doc = {"schema": SCHEMA, "dry_run": run.dry_run, "budget_s": run.budget_s,
           "wall_s": round(time.monotonic() - run.start, 1), "bundle": manifest, "device": run.device,
           "parts": run.parts, "counts": counts, "rows": run.rows}
    (run.out / "gpu_rows.json").write_text(json.dumps(doc, indent=1) + "\n")
    text = table(run)
    (run.out / "gpu_table.txt").write_text(text)
    with tarfile.open(run.out / "gpu_logs.tar.xz", "w:xz") as tar:
        tar.add(run.logs, arcname="logs")
    shutil.rmtree(run.logs)
    sys.stdout.write(text)
    return counts


def unpack(bundle_file, into):
    with tarfile.open(bundle_file, "r:xz") as tar:
        tar.extractall(into, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    roots = [p for p in pathlib.Path(into).iterdir() if p.is_dir()]
    if len(roots) != 1 or not (roots[0] / "MANIFEST.json").exists():
        raise ValueError("it holds no folder with a MANIFEST.json (make gpu-bundle writes one)")
    return roots[0], json.loads((roots[0] / "MANIFEST.json").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(os.environ.get("OUT") or "build/gpu-run"))
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run (480)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: the bundle's checks run on the CUDA emulator")
    ap.add_argument("--checks", default="", help="comma-separated check programs (all by default)")
    a = ap.parse_args()
    if not pathlib.Path("tests/golden").is_dir():
        ap.error("run from the repository root (the checks read tests/golden/)")
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkd-gpu-") as tmp:
        try:
            bundle, manifest = unpack(a.bundle, tmp)
        except (OSError, tarfile.TarError, ValueError) as e:
            print(f"device_run: {a.bundle}: not a readable bundle: {e}", file=sys.stderr)
            return 2
        if manifest.get("emulated", False) != a.dry_run:
            print(f"device_run: {a.bundle} is {'an emulated' if manifest.get('emulated') else 'a GPU'} bundle; "
                  f"{'--dry-run needs an emulated one' if a.dry_run else 'add --dry-run to rehearse with it'}", file=sys.stderr)
            return 2
        available = sorted(manifest["checks"], key=lambda n: (n in LAST_CHECKS, LAST_CHECKS.index(n) if n in LAST_CHECKS else 0, n))
        names = [n for n in a.checks.split(",") if n] or available
        unknown = [n for n in names if n not in available]
        if unknown:
            print(f"device_run: no check named {', '.join(unknown)} in the bundle ({', '.join(available)})", file=sys.stderr)
            return 2
        run = Run(a.out, a.budget, a.dry_run)
        run.part("device", part_device, run, bundle, manifest)
        run.part("checks", part_checks, run, bundle, names)
        run.part("compass", part_compass, run, bundle)
        run.part("serve", part_serve, run, bundle)
        run.part("smollm2", part_smollm2, run, bundle)
        counts = write_results(run, manifest)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
