#!/usr/bin/env python3
"""Writes a GGUF whose quantized tensors are dequantized to F16 (or F32, or requantized
to Q8_0), everything else as it was: a larger copy of a quantized model, so that the
quantized file can serve as its draft model in the draft-speculation benchmark
(tests/bench/spec_bench.py).

  python tests/bench/dequantize_gguf.py IN.gguf OUT.gguf [--type f16|f32|q8_0]

The values are the quantized file's, so the pair agrees more than a model and its own
quantization from the original weights would: the benchmark's acceptance is an upper bound.
"""
import argparse
import os

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", choices=["f16", "f32", "q8_0"], default="f16")
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(args.dst + ".tmp", arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    plain = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for t in reader.tensors:
        if t.tensor_type in plain:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        if args.type == "q8_0":
            writer.add_tensor(t.name, gguf.quants.quantize(values, q8_0), raw_dtype=q8_0)
        else:
            writer.add_tensor(t.name, values.astype(np.float16 if args.type == "f16" else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(args.dst + ".tmp", args.dst)


if __name__ == "__main__":
    main()
