#!/usr/bin/env python3
"""Writes how far transformers' own 16-bit forwards land from its f32 one on a tiny model:
the error that BF16 or FP16 activations alone cost the reference implementation, which is
what a device path in that type can fairly be held to (tests/gpu/check_model.cu).

Each pair of forwards uses the same weights, every parameter rounded to the 16-bit type
(the device holds them so, and check_model gives the CPU reference the same rounding), so
what differs is only the rounding of the activations: transformers run with dtype=bfloat16
or float16 against the same module in f32. The sequences are the model's golden ones
(golden.json), each in one forward; the error of a row is max |half - f32| / max |f32| over
its logits, as tests/gpu/gpu_check.h's rel_error takes it.

Measured with transformers 5.24 and torch 2.15: the llama family's BF16 is 1.2e-2 (the tiny
llama and Qwen3), under check_model's BF16 limit of 2e-2. The Gated DeltaNet hybrids need
more: the recurrence and the gated norm carry the rounding further (the tiny Qwen3.5: BF16
2.3e-2 to 4.5e-2, FP16 2.0e-3 to 6.0e-3, against the llama family's FP16 limit of 3e-3).
Models with a router are not written: transformers' BF16 run picks other experts than its
f32 one now and then (the tiny Qwen3-Next: 0.57), an error of the router's margins, not of
the arithmetic.

Besides the weights as stored, a model may be measured with other weights of the same
shapes: "nvfp4" is the tiny Qwen3.5 with its projections quantized as ModelOpt does
(tests/gen/gen_modelopt_hybrid.py's values copy), whose activations differ.

Writes tests/golden/models/<name>/half_reference.json. Run where torch is installed (CI
has none, so the outputs are committed):
  python tests/gen/gen_half_reference.py [NAME ...]   (default: qwen3_5)
"""
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_modelopt_hybrid  # noqa: E402

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "models")
# Other weights of a model: name -> function(out_dir) returning the folder that holds them.
VARIANTS = {"qwen3_5": {"nvfp4": lambda out: gen_modelopt_hybrid.write(out)[1]}}
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def row_errors(want, got):
    return [float(np.abs(got[i] - want[i]).max() / np.abs(want[i]).max()) for i in range(len(want))]


def measure(folder, sequences, dtype):
    cls = getattr(transformers, transformers.AutoConfig.from_pretrained(folder).architectures[0])
    f32 = cls.from_pretrained(folder, dtype=torch.float32).eval()
    for p in f32.parameters():
        p.data = p.data.to(dtype).to(torch.float32)
    half = cls.from_pretrained(folder, dtype=dtype).eval()
    per_sequence = []
    for seq in sequences:
        with torch.no_grad():
            want = f32(torch.tensor([seq])).logits[0].numpy()
            got = half(torch.tensor([seq])).logits[0].float().numpy()
        per_sequence.append(max(row_errors(want, got)))
    return {"per_sequence": [round(e, 6) for e in per_sequence], "max_rel_error": round(max(per_sequence), 6)}


def measure_model(name, out_dir):
    folder = os.path.join(MODELS, name)
    with open(os.path.join(folder, "golden.json")) as f:
        sequences = json.load(f)["sequences"]
    folders = {"as stored": folder}
    for variant, write in VARIANTS.get(name, {}).items():
        folders[variant] = write(os.path.join(out_dir, variant))
    return {
        "what": "transformers' 16-bit forward against its f32 forward, both with the weights rounded to that type: "
                "the worst row's max |diff| / max |f32 logit|, per golden sequence, for the weights as stored and "
                "for each variant (tests/gen/gen_half_reference.py)",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "sequence_lengths": [len(s) for s in sequences],
        "weights": {w: {t: measure(f, sequences, dt) for t, dt in TYPES.items()} for w, f in folders.items()},
    }


def main():
    for name in sys.argv[1:] or ["qwen3_5"]:
        with tempfile.TemporaryDirectory() as out_dir:
            result = measure_model(name, out_dir)
        with open(os.path.join(MODELS, name, "half_reference.json"), "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        for w, types in result["weights"].items():
            print(name, w, {t: r["max_rel_error"] for t, r in types.items()})


if __name__ == "__main__":
    main()
