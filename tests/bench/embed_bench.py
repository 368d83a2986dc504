#!/usr/bin/env python3
"""Embedding throughput: sparkd serving an embedder ([model] role = "embed", CPU backend) side
by side with llama.cpp's embedding mode (llama-cpp-python) on the same GGUF, same threads, one run.

The model is a dummy-weights Qwen3 embedder written here by the gguf package (llama.cpp's `qwen3`
layout, pooling_type last, F16 matrices; --hidden and --layers size it). Each engine embeds
batches of 1, 16 and 64 inputs of --input-len token ids (the same ids for both): sparkd through
POST /v1/embeddings (one request of the whole batch, as clients send it; the engine batches the
inputs), llama.cpp through its batch API with one sequence per input and last-token pooling,
as many sequences per llama_decode as fit its batch (--llama-batch tokens). Both normalise.
Each engine runs --repeats times per batch size, alternating, and the best run of each is reported
(the machines here are shared); the vectors of both are compared once (cosine), so the two
compute the same thing.

  python tests/bench/embed_bench.py [--threads 2] [--sparkd build/sparkd] [--input-len 512]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import gguf
import numpy as np
import requests

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_peer import clear_memory, open_context  # noqa: E402


def write_embedder(path, hidden, layers, vocab, ff, heads, kv_heads, seed=0):
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    wr = gguf.GGUFWriter(path, "qwen3")
    wr.add_block_count(layers)
    wr.add_context_length(4096)
    wr.add_embedding_length(hidden)
    wr.add_feed_forward_length(ff)
    wr.add_head_count(heads)
    wr.add_head_count_kv(kv_heads)
    wr.add_rope_freq_base(1000000.0)
    wr.add_layer_norm_rms_eps(1e-6)
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_file_type(1)  # MOSTLY_F16
    wr.add_pooling_type(gguf.PoolingType.LAST)
    tokens = [bytes([b]).decode("latin-1") for b in range(256)] + [f"t{i}" for i in range(vocab - 257)] + ["<|endoftext|>"]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("qwen2")
    wr.add_token_list(tokens)
    wr.add_token_types([1] * (vocab - 1) + [3])
    wr.add_token_merges(["t 1"])
    wr.add_eos_token_id(vocab - 1)
    wr.add_add_bos_token(False)
    wr.add_add_eos_token(False)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    wr.add_tensor("token_embd.weight", rng.standard_normal((vocab, hidden), dtype=np.float32).astype(np.float16))
    wr.add_tensor("output_norm.weight", norm(hidden))
    for i in range(layers):
        wr.add_tensor(f"blk.{i}.attn_norm.weight", norm(hidden))
        wr.add_tensor(f"blk.{i}.attn_q.weight", mat(heads * hd, hidden))
        wr.add_tensor(f"blk.{i}.attn_k.weight", mat(kv_heads * hd, hidden))
        wr.add_tensor(f"blk.{i}.attn_v.weight", mat(kv_heads * hd, hidden))
        wr.add_tensor(f"blk.{i}.attn_output.weight", mat(hidden, heads * hd))
        wr.add_tensor(f"blk.{i}.attn_q_norm.weight", norm(hd))
        wr.add_tensor(f"blk.{i}.attn_k_norm.weight", norm(hd))
        wr.add_tensor(f"blk.{i}.ffn_norm.weight", norm(hidden))
        wr.add_tensor(f"blk.{i}.ffn_gate.weight", mat(ff, hidden))
        wr.add_tensor(f"blk.{i}.ffn_up.weight", mat(ff, hidden))
        wr.add_tensor(f"blk.{i}.ffn_down.weight", mat(hidden, ff))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def inputs(n, length, vocab, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(256, vocab - 1, size=length).tolist() for _ in range(n)]


class Sparkd:
    def __init__(self, model, threads, input_len, exe):
        from conftest import Server
        self.server = Server(settings={"model.role": "embed", "engine.backend": "cpu", "engine.cpu_threads": threads,
                                       "model.max_model_len": input_len, "engine.max_num_seqs": 64,
                                       "engine.max_num_batched_tokens": 8192, "engine.enable_prefix_caching": False},
                             model=model, binary=exe).wait_ready()
        self.url = self.server.url + "/v1/embeddings"

    def embed(self, batch):
        r = requests.post(self.url, json={"input": batch, "encoding_format": "base64"}, timeout=3600)
        r.raise_for_status()
        import base64
        return [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]

    def close(self):
        self.server.stop()


class LlamaCpp:
    def __init__(self, model, threads, input_len, tokens_per_decode):
        self.per_decode = max(1, tokens_per_decode // input_len)
        tokens = self.per_decode * input_len
        last = 3  # LLAMA_POOLING_TYPE_LAST
        self.L, self.model, self.ctx = open_context(model, threads, tokens, tokens, self.per_decode, embeddings=True,
                                                    pooling_type=last)
        L = self.L
        self.batch = L.llama_batch_init(tokens, 0, self.per_decode)
        self.hidden = L.llama_model_n_embd(self.model) if hasattr(L, "llama_model_n_embd") else L.llama_n_embd(self.model)
        self.version = getattr(L, "__version__", "?")


    def embed(self, batch):
        out = []
        for first in range(0, len(batch), self.per_decode):
            group = batch[first:first + self.per_decode]
            clear_memory(self.L, self.ctx)
            b = self.batch
            n = 0
            for s, ids in enumerate(group):
                for p, tok in enumerate(ids):
                    b.token[n], b.pos[n], b.n_seq_id[n] = tok, p, 1
                    b.seq_id[n][0] = s
                    b.logits[n] = 1 if p == len(ids) - 1 else 0
                    n += 1
            b.n_tokens = n
            if self.L.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")
            for s in range(len(group)):
                ptr = self.L.llama_get_embeddings_seq(self.ctx, s)
                v = np.ctypeslib.as_array(ptr, shape=(self.hidden,)).astype(np.float32)
                out.append(v / max(np.linalg.norm(v), 1e-12))
        return out

    def close(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparkd", default=os.path.join(ROOT, "build", "sparkd"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--llama-batch", type=int, default=8192, help="tokens per llama_decode (whole sequences)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    tmp = tempfile.mkdtemp(prefix="embed-bench-")
    model = os.path.join(tmp, "embedder.gguf")
    write_embedder(model, args.hidden, args.layers, args.vocab, ff=3 * args.hidden, heads=args.hidden // 64,
                   kv_heads=max(1, args.hidden // 192))
    engines = {"sparkd": Sparkd(model, args.threads, args.input_len, args.sparkd)}
    try:
        engines["llama.cpp"] = LlamaCpp(model, args.threads, args.input_len, args.llama_batch)
    except ImportError:
        print("llama_cpp is not installed (pip install llama-cpp-python): reporting sparkd only")
    try:
        check = inputs(4, args.input_len, args.vocab, seed=99)
        vecs = {name: e.embed(check) for name, e in engines.items()}
        if len(vecs) == 2:
            cos = min(float(a @ b) for a, b in zip(vecs["sparkd"], vecs["llama.cpp"]))
            print(f"same vectors: min cosine sparkd vs llama.cpp over 4 inputs = {cos:.6f}")
        best = {}
        for n in batches:
            batch = inputs(n, args.input_len, args.vocab, seed=n)
            for _ in range(args.repeats):
                for name, e in engines.items():
                    t0 = time.perf_counter()
                    e.embed(batch)
                    dt = time.perf_counter() - t0
                    key = (name, n)
                    best[key] = min(best.get(key, dt), dt)
    finally:
        for e in engines.values():
            e.close()
    load = os.getloadavg()[0]
    print(f"dummy Qwen3 embedder (hidden {args.hidden}, {args.layers} layers, F16), {args.input_len}-token inputs, "
          f"{args.threads} threads, best of {args.repeats}, load average {load:.2f}"
          + (" (indicative: machine loaded)" if load > 1.5 else ""))
    print(f"{'batch':>6}{'engine':>12}{'inputs/s':>12}{'tokens/s':>12}{'sparkd / llama.cpp':>20}")
    rows = []
    for n in batches:
        for name in engines:
            dt = best[(name, n)]
            ratio = best[("llama.cpp", n)] / dt if name == "sparkd" and ("llama.cpp", n) in best else None
            print(f"{n:>6}{name:>12}{n / dt:>12.2f}{n * args.input_len / dt:>12.0f}" + (f"{ratio:>20.2f}" if ratio else ""))
            rows.append({"batch": n, "engine": name, "inputs_per_s": n / dt, "tokens_per_s": n * args.input_len / dt})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": load, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
