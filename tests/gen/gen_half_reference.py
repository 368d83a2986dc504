#!/usr/bin/env python3
"""Writes how far transformers' own BF16 forward lands from its f32 one on a tiny model:
the error that BF16 activations alone cost the reference implementation, which is what a
BF16 device path can fairly be held to (tests/gpu/check_model.cu).

Both forwards use the same weights, every parameter rounded to BF16 (the device holds
them so, and check_model gives the CPU reference the same rounding), so what differs is
only the rounding of the activations: transformers run with dtype=bfloat16 against the
same module in f32. The sequences are the model's golden ones (golden.json), each in one
forward; the error of a row is max |bf16 - f32| / max |f32| over its logits, as
tests/gpu/gpu_check.h's rel_error takes it.

For the llama family this is 1.2e-2 (the tiny llama and Qwen3), under check_model's BF16
limit of 2e-2. The Gated DeltaNet hybrids need more: the recurrence and the gated norm
carry the rounding further (the tiny Qwen3.5: 2.3e-2 to 4.5e-2). Models with a router
are not written: transformers' BF16 run picks other experts than its f32 one now and then
(the tiny Qwen3-Next: 0.57), an error of the router's margins, not of the arithmetic.

Writes tests/golden/models/<name>/bf16_reference.json. Run where torch is installed (CI
has none, so the outputs are committed):
  python tests/gen/gen_bf16_reference.py [NAME ...]   (default: qwen3_5)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "models")


def row_errors(want, got):
    return [float(np.abs(got[i] - want[i]).max() / np.abs(want[i]).max()) for i in range(len(want))]


def measure(name):
    folder = os.path.join(MODELS, name)
    with open(os.path.join(folder, "golden.json")) as f:
        golden = json.load(f)
    cls = getattr(transformers, transformers.AutoConfig.from_pretrained(folder).architectures[0])
    f32 = cls.from_pretrained(folder, dtype=torch.float32).eval()
    for p in f32.parameters():
        p.data = p.data.to(torch.bfloat16).to(torch.float32)
    bf16 = cls.from_pretrained(folder, dtype=torch.bfloat16).eval()
    per_sequence = []
    for seq in golden["sequences"]:
        with torch.no_grad():
            want = f32(torch.tensor([seq])).logits[0].numpy()
            got = bf16(torch.tensor([seq])).logits[0].float().numpy()
        per_sequence.append(max(row_errors(want, got)))
    return {
        "what": "transformers' BF16 forward against its f32 forward, both with the weights rounded to BF16: "
                "the worst row's max |diff| / max |f32 logit|, per golden sequence (tests/gen/gen_bf16_reference.py)",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "sequence_lengths": [len(s) for s in golden["sequences"]],
        "per_sequence": [round(e, 6) for e in per_sequence],
        "max_rel_error": round(max(per_sequence), 6),
    }


def main():
    for name in sys.argv[1:] or ["qwen3_5"]:
        result = measure(name)
        with open(os.path.join(MODELS, name, "bf16_reference.json"), "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(name, result["per_sequence"], "max", result["max_rel_error"])


if __name__ == "__main__":
    main()
