"""The tiny XLM-RoBERTa embedder and cross-encoder of tests/golden/models (gen_encoder_models.py) as
GGUF files, the way llama.cpp's converter writes XLMRobertaModel and
XLMRobertaForSequenceClassification (bge-m3, bge-reranker-v2-m3): architecture `bert`, not causal,
the SentencePiece vocabulary as tokenizer.ggml.model "t5", tensors under llama.cpp's BERT names, and
the position embeddings without their first pad_token_id + 1 rows (RoBERTa numbers positions from
there), so bert.context_length is max_position_embeddings - 2.

Where this differs from the converter, on purpose:
  - bert.pooling_type is written for both: 2 (CLS, from 1_Pooling/config.json, as the converter
    does) for the embedder and 4 (RANK) for the cross-encoder, which the converter leaves to the
    user (llama-server --reranking);
  - the tiny tokenizer normalizes with NFKC, not a SentencePiece charsmap, so no
    tokenizer.ggml.precompiled_charsmap is written: text that NFKC changes tokenizes differently
    from tokenizer.json (the golden files' ids are tokenizer.json's);
  - every tensor is F32 (general.file_type 0).

numpy and the gguf package only, so the tests write them (into build/) rather than the tree
holding them:
  build/venv/bin/python tests/gen/gguf_encoder.py [--out build/golden/models]
"""
import argparse
import json
import os

import gguf
import numpy as np

from gguf_pooling import read_safetensors

# Hugging Face BERT/RoBERTa names (after roberta.) -> llama.cpp's, per layer and outside them.
LAYER_NAMES = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
GLOBAL_NAMES = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.LayerNorm": "token_embd_norm",
    "classifier.dense": "cls",
    "classifier.out_proj": "cls.output",
}

# SentencePiece token types, as tokenizer.ggml.token_type holds them.
NORMAL, UNKNOWN, CONTROL = 1, 2, 3


def gguf_name(hf_name):
    """llama.cpp's name for a checkpoint tensor; None for those the converter drops."""
    name = hf_name[len("roberta."):] if hf_name.startswith("roberta.") else hf_name
    if name.startswith("pooler.") or name == "embeddings.position_ids":
        return None
    stem, kind = name.rsplit(".", 1)
    if stem in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[stem]}.{kind}"
    parts = stem.split(".")
    if parts[:2] == ["encoder", "layer"] and ".".join(parts[3:]) in LAYER_NAMES:
        return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:])]}.{kind}"
    raise ValueError(f"no GGUF name for tensor {hf_name}")


def add_tokenizer(wr, folder):
    """The Unigram vocabulary with scores and types, and the special tokens gguf's SpecialVocab
    finds: XLM-R's post-processor <s> A </s> </s> B </s> means BOS, EOS and SEP (</s>) are all
    added. (SpecialVocab would skip cls_token: the writer has no key for it.)"""
    tok = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    pieces = tok["model"]["vocab"]
    tokens = [p[0] for p in pieces]
    scores = [float(p[1]) for p in pieces]
    special = {a["content"] for a in tok["added_tokens"] if a["special"]}
    ids = {t: i for i, t in enumerate(tokens)}
    unk = tok["model"]["unk_id"]
    types = [UNKNOWN if i == unk else CONTROL if t in special else NORMAL for i, t in enumerate(tokens)]
    wr.add_tokenizer_model("t5")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_scores(scores)
    wr.add_token_types(types)
    wr.add_add_space_prefix(True)
    wr.add_remove_extra_whitespaces(True)
    wr.add_bos_token_id(ids[cfg["bos_token"]])
    wr.add_eos_token_id(ids[cfg["eos_token"]])
    wr.add_unk_token_id(unk)
    wr.add_sep_token_id(ids[cfg["sep_token"]])
    wr.add_pad_token_id(ids[cfg["pad_token"]])
    wr.add_mask_token_id(ids[cfg["mask_token"]])
    wr.add_add_bos_token(True)
    wr.add_add_eos_token(True)
    wr.add_add_sep_token(True)


def write_encoder_gguf(model_dir, out_path):
    """model_dir: tests/golden/models/xlmr_embed or xlmr_rerank; out_path: the .gguf to write."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    rerank = cfg["architectures"][0] == "XLMRobertaForSequenceClassification"
    offset = cfg["pad_token_id"] + 1
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tmp = out_path + ".tmp"
    wr = gguf.GGUFWriter(tmp, "bert")
    wr.add_context_length(cfg["max_position_embeddings"] - offset)
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_layer_norm_eps(cfg["layer_norm_eps"])
    wr.add_causal_attention(False)
    wr.add_file_type(0)  # ALL_F32
    wr.add_token_type_count(cfg.get("type_vocab_size", 1))
    if rerank:
        wr.add_pooling_type(gguf.PoolingType.RANK)
        # The converter keeps id2label unless it is transformers' two dummy labels.
        labels = cfg.get("id2label") or {}
        if labels and not (len(labels) == 2 and labels.get("0") == "LABEL_0"):
            wr.add_classifier_output_labels([v for _, v in sorted(labels.items())])
    else:
        with open(os.path.join(model_dir, "1_Pooling", "config.json")) as f:
            pooling = json.load(f)
        if not pooling["pooling_mode_cls_token"]:
            raise ValueError(f"{model_dir}: the XLM-R embedder is written with CLS pooling only")
        wr.add_pooling_type(gguf.PoolingType.CLS)
    add_tokenizer(wr, model_dir)
    for hf_name, a in tensors.items():
        name = gguf_name(hf_name)
        if name is None:
            continue
        if name == "position_embd.weight":
            a = a[offset:]
        wr.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    os.replace(tmp, out_path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(repo, "tests", "golden", "models"))
    ap.add_argument("--out", default=os.path.join(repo, "build", "golden", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in ("xlmr_embed", "xlmr_rerank"):
        path = os.path.join(args.out, f"{name}.gguf")
        write_encoder_gguf(os.path.join(args.models, name), path)
        print(path)


if __name__ == "__main__":
    main()
