#!/usr/bin/env python3
"""Golden next-token log-probabilities for the tiny hybrids in NVFP4: transformers' f32
forward over the values an NVFP4 checkpoint of gen_modelopt_hybrid.py holds (its "values"
copy: e2m1 x e4m3 x weight_scale_2 of each quantized matrix, the rest as stored), for
tests/integration/test_modelopt.py to hold the served NVFP4 checkpoint to.

For each of the model's first three golden sequences and each prefix, the top 20 token ids
with their log-probabilities and the row's max |logit| (the scale the test's error is taken
against). The values file's sha256 is kept beside them: the test checks that
gen_modelopt_hybrid still writes the values these were computed from.

Writes tests/golden/models/<model>/nvfp4_golden.json. Run where torch is installed (CI has
none, so the outputs are committed):
  python tests/gen/gen_nvfp4_hybrid_golden.py [MODEL ...]   (default: qwen3_5 nemotron_h)
"""
import hashlib
import json
import os
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_modelopt_hybrid  # noqa: E402

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "models")
SEQUENCES = 3
TOP = 20


def golden(model, out_dir):
    _, values = gen_modelopt_hybrid.write(out_dir, model)
    with open(os.path.join(values, "model.safetensors"), "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    cls = getattr(transformers, transformers.AutoConfig.from_pretrained(values).architectures[0])
    net = cls.from_pretrained(values, dtype=torch.float32).eval()
    with open(os.path.join(MODELS, model, "golden.json")) as f:
        sequences = json.load(f)["sequences"][:SEQUENCES]
    rows = []
    for seq in sequences:
        with torch.no_grad():
            logits = net(torch.tensor([seq])).logits[0].double()
        logprobs = torch.log_softmax(logits, dim=-1)
        top = torch.topk(logprobs, TOP, dim=-1)
        rows.append([{"ids": top.indices[i].tolist(), "logprobs": [round(v, 7) for v in top.values[i].tolist()],
                      "max_abs_logit": round(float(logits[i].abs().max()), 6)} for i in range(len(seq))])
    return {"what": "transformers' f32 forward over gen_modelopt_hybrid.py's NVFP4 values copy: per golden sequence "
                    "and prefix, the top-20 next-token ids and log-probabilities (tests/gen/gen_nvfp4_hybrid_golden.py)",
            "transformers": transformers.__version__, "torch": torch.__version__,
            "values_sha256": sha256, "sequences": sequences, "rows": rows}


def main():
    for model in sys.argv[1:] or ["qwen3_5", "nemotron_h"]:
        with tempfile.TemporaryDirectory() as out_dir:
            result = golden(model, out_dir)
        with open(os.path.join(MODELS, model, "nvfp4_golden.json"), "w") as f:
            json.dump(result, f, separators=(",", ":"))
            f.write("\n")
        print(model, result["values_sha256"], sum(len(r) for r in result["rows"]), "rows")


if __name__ == "__main__":
    main()
