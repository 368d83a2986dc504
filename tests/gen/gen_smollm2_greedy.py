#!/usr/bin/env python3
"""Greedy continuations of the default SmolLM2 GGUF from an independent implementation.

Reference: Hugging Face transformers loading models/SmolLM2-135M-Instruct.Q4_1.gguf with
`gguf_file=`, which dequantizes every tensor to f32 and runs the model in f32. That is the
closest independent match to sparkd's CPU backend, which also computes in f32 over the
exactly dequantized weights. llama.cpp was not used: it quantizes activations to Q8 for
its quantized matmuls, so its greedy text can legitimately differ from an f32 computation.

For each of 8 fixed prompts (raw text, tokenized by transformers' tokenizer from the same
file, special tokens added as transformers does) it takes 32 argmax steps without stopping
at EOS, and writes tests/golden/smollm2_greedy.json with the prompt ids, the output ids
and, per step, the gap between the best and second-best logit (a small gap marks a step
where rounding differences could legitimately flip the choice).

  python tests/gen/gen_smollm2_greedy.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "Water boils at a temperature of",
    "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5,",
    "Machine learning is a field of study that",
]
NEW_TOKENS = 32


def main():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "smollm2_greedy.json"))
    args = ap.parse_args()
    folder, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    cases = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tok(prompt)["input_ids"]
            out = model(torch.tensor([ids]), use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
            generated, gaps = [], []
            for _ in range(NEW_TOKENS):
                top2 = torch.topk(logits.float(), 2)
                nxt = int(top2.indices[0])
                generated.append(nxt)
                gaps.append(round(float(top2.values[0] - top2.values[1]), 5))
                out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[0, -1]
            cases.append({"prompt": prompt, "prompt_ids": ids, "output_ids": generated,
                          "top2_gap": gaps, "text": tok.decode(generated)})
            print(repr(prompt), "->", repr(cases[-1]["text"]), "min gap", min(gaps))
    meta = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "reference": f"transformers {transformers.__version__} (gguf_file, dequantized to f32), "
                         f"torch {torch.__version__}, greedy argmax, no EOS stop",
            "new_tokens": NEW_TOKENS, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
