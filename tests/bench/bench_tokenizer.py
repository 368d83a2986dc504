"""bench_tokenizer.py — one-thread encode throughput of sparkd vs Hugging Face `tokenizers`.

    SPARKD_BIN=build/sparkd build/venv/bin/python tests/bench/bench_tokenizer.py [names...]

Both encode the same texts (the oracle corpus, repeated) with the same tokenizer files.
sparkd's time covers its encode calls only (`sparkd tokenize --stats`); the reference's
covers its encode calls only, with its thread pool disabled. Both are CPU time (the reference: of the whole process, any pool threads included; sparkd: of the
encoding thread, so a busy machine skews them less than wall time would. Prints MB/s.
"""
import gzip
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import tokenizer_reference as ref  # noqa: E402

SPARKD = os.environ.get("SPARKD_BIN", str(REPO / "build" / "sparkd"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "8"))


def texts():
    with gzip.open(REPO / "tests" / "golden" / "tokenizer" / "corpus.json.gz", "rt", encoding="utf-8") as f:
        corpus = json.load(f)
    base = [s.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for s in corpus]
    return base * REPEAT


def bench_reference(name, data):
    tok = ref.reference(name)
    tok.encode_batch(data[:200])  # warm-up
    t0 = time.process_time()
    for t in data:
        tok.encode(t)
    loop = time.process_time() - t0
    t0 = time.process_time()
    tok.encode_batch(data)
    batch = time.process_time() - t0
    return min(loop, batch)


def bench_sparkd(name, data):
    lines = "".join(json.dumps({"text": t}) + "\n" for t in data).encode()
    proc = subprocess.run([SPARKD, "tokenize", "--stats", "--model", str(ref.model_path(name))], input=lines,
                          capture_output=True, check=True)
    line = [l for l in proc.stderr.decode().splitlines() if l.startswith("encode:")][-1]
    return float(line.split(" in ")[1].split(" s")[0])


def main():
    names = sys.argv[1:] or ref.ALL_NAMES
    data = texts()
    mb = sum(len(t.encode()) for t in data) / 1e6
    print(f"{len(data)} texts, {mb:.2f} MB, one thread")
    print(f"{'tokenizer':10s} {'sparkd MB/s':>12s} {'HF tokenizers MB/s':>19s} {'ratio':>6s}")
    for name in names:
        if not ref.available(name):
            continue
        s = bench_sparkd(name, data)
        r = bench_reference(name, data)
        print(f"{name:10s} {mb / s:12.2f} {mb / r:19.2f} {r / s:6.2f}x")


if __name__ == "__main__":
    main()
