#!/usr/bin/env python3
"""Time to first token on a hybrid, cold and resumed from a state checkpoint, one run.

Builds a Qwen3.5-style dense hybrid of 0.51 B parameters with dummy weights (24 layers, 18
Gated DeltaNet and 6 attention, hidden 1024, an 8192-token vocabulary of single characters
so that any answer maps back to its ids), starts `sparkd serve` on the CPU backend with
prefix caching on, and for each repeat:

  cold    a fresh --prompt-len-token prompt (token ids, nothing of it cached)
  cached  the next turn: that prompt, its answer and --new-tokens more tokens, which
          resumes from the checkpoint the answer left

TTFT is the time from sending the request to the first streamed chunk carrying a token. Cold
and cached requests alternate, each repeat with a new prompt; the table shows every repeat
and the medians.

  python tests/bench/hybrid_resume_bench.py [--bin build/sparkd] [--repeats 3] [--threads N]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from spec_bench import free_port, wait_ready

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = 0x4E00  # token i is the character U+4E00 + i
VOCAB = 8192
EOS = 2


def model_folder(d):
    """config.json and a one-character-a-token tokenizer for dummy weights."""
    layers = 24
    text = {"model_type": "qwen3_5_text", "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": layers,
            "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)],
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "linear_conv_kernel_dim": 4,
            "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 16,
            "linear_value_head_dim": 128, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": True, "vocab_size": VOCAB,
            "bos_token_id": 1, "eos_token_id": EOS, "dtype": "bfloat16",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                "mrope_interleaved": True, "mrope_section": [11, 11, 10]}}
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "dtype": "bfloat16",
              "tie_word_embeddings": True, "text_config": text}
    eos = {"id": EOS, "content": chr(BASE + EOS), "single_word": False, "lstrip": False, "rstrip": False,
           "normalized": False, "special": True}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
                 "post_processor": None, "decoder": None, "added_tokens": [eos],
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                           "vocab": {chr(BASE + i): i for i in range(VOCAB)}, "merges": []}}
    files = {"config.json": config, "tokenizer.json": tokenizer,
             "tokenizer_config.json": {"eos_token": chr(BASE + EOS), "chat_template": "{% for m in messages %}"
                                       "{{ m['content'] }}{% endfor %}"}}
    for name, body in files.items():
        with open(os.path.join(d, name), "w") as f:
            json.dump(body, f)


def stream(url, prompt, max_tokens):
    """One greedy streamed completion: (TTFT s, answer ids, cached_tokens)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "logprobs": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    ttft, ids, cached = None, [], None
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                # Each token decoded alone, special ones included (the text leaves EOS out):
                # one character, one id.
                tokens = (choice.get("logprobs") or {}).get("tokens") or []
                if (tokens or choice.get("text")) and ttft is None:
                    ttft = time.perf_counter() - start
                ids += [ord(t) - BASE for t in tokens]
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
    if len(ids) != max_tokens or cached is None:
        sys.exit(f"expected {max_tokens} tokens and a usage chunk, got {len(ids)} tokens, cached_tokens {cached}")
    return ttft, ids, cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "sparkd"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-len", type=int, default=2000)
    ap.add_argument("--answer-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=20)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hybrid-resume-bench-")
    model = os.path.join(tmp, "model")
    os.mkdir(model)
    model_folder(model)
    port = free_port()
    config = os.path.join(tmp, "spark.toml")
    with open(config, "w") as f:
        f.write(f'[model]\npath = "{model}"\nload_format = "dummy"\nmax_model_len = 4096\n'
                f'[engine]\nbackend = "cpu"\ncpu_threads = {args.threads}\nmax_num_seqs = 4\n'
                f'enable_prefix_caching = true\n[server]\nport = {port}\n[log]\nlevel = "warn"\n')
    url = f"http://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "sparkd.log"), "w")
    proc = subprocess.Popen([args.bin, "serve", "--config", config], stdout=log, stderr=subprocess.STDOUT)
    rng = random.Random(0)
    fresh = lambda n: [rng.randrange(3, VOCAB) for _ in range(n)]  # noqa: E731
    rows = []
    try:
        wait_ready(url, proc, timeout=300)
        stream(url, fresh(64), 4)  # first touches of weights and workspace, outside the timings
        print(f"{args.prompt_len}-token prompts, {args.answer_len}-token answers, {args.new_tokens} new tokens "
              f"a turn, {args.threads} threads (load average {os.getloadavg()[0]:.2f})", flush=True)
        print(f"{'repeat':>6} {'cold TTFT s':>12} {'cached TTFT s':>14} {'ratio':>7} {'cached_tokens':>14} "
              f"{'of prompt':>10}", flush=True)
        for i in range(args.repeats):
            prompt = fresh(args.prompt_len)
            cold, answer, cold_cached = stream(url, prompt, args.answer_len)
            follow = prompt + answer + fresh(args.new_tokens)
            warm, _, cached = stream(url, follow, args.answer_len)
            if cold_cached:
                print(f"  (the cold prompt found {cold_cached} tokens cached)")
            rows.append((cold, warm, cached, len(follow)))
            print(f"{i + 1:>6} {cold:>12.3f} {warm:>14.3f} {cold / warm:>7.1f} {cached:>14} {len(follow):>10}",
                  flush=True)
        cold_med = statistics.median(r[0] for r in rows)
        warm_med = statistics.median(r[1] for r in rows)
        print(f"{'median':>6} {cold_med:>12.3f} {warm_med:>14.3f} {cold_med / warm_med:>7.1f}")
        print(f"(load average {os.getloadavg()[0]:.2f} at the end)")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


if __name__ == "__main__":
    main()
