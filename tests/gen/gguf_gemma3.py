#!/usr/bin/env python3
"""Writes the tiny Gemma 3 (tests/golden/models/gemma3_gguf, BF16) as llama.cpp's converter
writes `gemma3` GGUF files, and checks the file with an independent reader: transformers
loads it (its GGUF integration undoes llama.cpp's layout) and must give the golden logits.

llama.cpp's layout (its Gemma3Model converter and loader):
- llama.cpp's tensor names: token_embd (the tied head: no output.weight), output_norm, and per
  block attn_norm, attn_q/k/v, attn_output, attn_q_norm, attn_k_norm, post_attention_norm
  (the attention's sandwich norm), ffn_norm (pre_feedforward_layernorm), ffn_gate/up/down,
  post_ffw_norm; Q and K rows not permuted (NeoX RoPE, as Hugging Face's);
- every norm stored as w + 1, in F32 (llama.cpp multiplies by the weight as it is);
- no layer types and no query scale: the loader makes every 6th layer full, scales queries
  by head_dim^-0.5 (all sizes but the 27B's) and reads attention.sliding_window, rope.freq_base
  (full layers, with rope.scaling linear), rope.freq_base_swa (sliding layers);
- a SentencePiece ("llama") vocabulary; the golden tests feed token ids, so a made-up one of
  the model's 128 pieces serves.

The file is not committed: write() needs only numpy, safetensors and gguf (the build's venv),
gives the same bytes every time, and tests/gen/golden_gguf.py calls it at test time into
build/golden/models/gemma3.gguf. Run by hand where torch and accelerate are installed to
check the file against transformers:
  python tests/gen/gguf_gemma3.py [--out build/golden/models]
"""
import argparse
import json
import os

import gguf
import numpy as np

import gen_qwen3_5_gguf
from gguf_pooling import read_safetensors

HF_TO_GGUF = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm",
}


def vocabulary(n):
    """n SentencePiece pieces: the special ones at Gemma's ids, then single characters and
    word starts."""
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>"]
    types = [3, 3, 3, 2]  # CONTROL, UNKNOWN
    words = ["\u2581"] + [chr(c) for c in range(33, 127)] + [f"\u2581{chr(c)}" for c in range(97, 123)]
    for ch in words + ["\u2581the", "\u2581and", "\u2581of"]:
        if len(pieces) == n:
            break
        pieces.append(ch)
        types.append(1)  # NORMAL
    assert len(pieces) == n, f"{n} pieces wanted, {len(pieces)} made"
    return pieces, [-float(i) for i in range(n)], types


def add_vocabulary(w, c):
    """The made-up SentencePiece vocabulary of c's vocab_size and its special ids, as the
    Gemma converters write a vocabulary's keys."""
    pieces, scores, types = vocabulary(c["vocab_size"])
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])
    w.add_pad_token_id(c["pad_token_id"])
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def write(src, path):
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    assert c["layer_types"] == ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                for i in range(c["num_hidden_layers"])], "llama.cpp's loader fixes every 6th layer full"
    assert c["query_pre_attn_scalar"] == c["head_dim"], "llama.cpp's loader scales queries by head_dim^-0.5"
    t = read_safetensors(os.path.join(src, "model.safetensors"))
    rope = c["rope_parameters"]
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    gen_qwen3_5_gguf.add_attention_keys(w, c)
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(rope["full_attention"]["factor"])
    w.add_sliding_window(c["sliding_window"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    add_vocabulary(w, c)

    def matrix(name, a):  # BF16 as the checkpoint has it (gguf writes the raw 16 bits)
        w.add_tensor(name, (a.view(np.uint32) >> 16).astype(np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)

    def norm(name, a):
        w.add_tensor(name, np.ascontiguousarray(a + 1, dtype=np.float32))

    matrix("token_embd.weight", t["model.embed_tokens.weight"])
    norm("output_norm.weight", t["model.norm.weight"])
    for layer in range(c["num_hidden_layers"]):
        for hf, ll in HF_TO_GGUF.items():
            a = t[f"model.layers.{layer}.{hf}.weight"]
            (norm if ll.endswith("norm") else matrix)(f"blk.{layer}.{ll}.weight", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_with_transformers(src, path):
    """transformers reads the file back (its GGUF integration) and must give the golden logits.
    Its reader takes the tensors and most keys, but not the two settings llama.cpp's loader
    derives (the query scale from head_dim, the full layers' linear RoPE scaling): those are
    given as the source config has them, so what is checked is the file's tensors and keys."""
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    gen_qwen3_5_gguf.check_with_transformers(src, path, attn_implementation="eager",
                                             query_pre_attn_scalar=c["query_pre_attn_scalar"],
                                             rope_parameters=c["rope_parameters"])


def main():
    """Writes (or refreshes) the file as the tests do, then checks it with transformers."""
    import golden_gguf
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(golden_gguf.PLAIN))
    args = ap.parse_args()
    golden_gguf.materialize(args.out, ["gemma3.gguf"])
    check_with_transformers(str(golden_gguf.MODELS / "gemma3_gguf"), os.path.join(args.out, "gemma3.gguf"))


if __name__ == "__main__":
    main()
