"""The tiny embedder and reranker of tests/golden/models (gen_pooling_models.py) as GGUF files,
the way llama.cpp's converter writes Qwen3-Embedding and Qwen3-Reranker: architecture `qwen3`,
`qwen3.pooling_type` 3 (last) or 4 (rank); the reranker's LM head replaced by `cls.output.weight`,
the rows of "yes" and "no" labelled by `qwen3.classifier.output_labels`, and its prompt in
`tokenizer.chat_template.rerank` with {query} and {document}. numpy and the gguf package only, so
the tests write them (into build/) rather than the tree holding them."""
import json
import os
import struct

import gguf
import numpy as np

from gen_loader_golden import GGUF_NAMES

RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: "
    "Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def read_safetensors(path):
    """f32 arrays of a safetensors file (BF16, F16 or F32), without torch."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            v = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            v = np.frombuffer(raw, dtype="<f4").copy()
        out[name] = v.reshape(t["shape"])
    return out


def add_tokenizer(wr, folder, add_eos):
    tok = json.load(open(os.path.join(folder, "tokenizer.json")))
    vocab = dict(tok["model"]["vocab"])
    special = {a["content"]: a["id"] for a in tok["added_tokens"]}
    vocab.update(special)
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    types = [3 if t in special else 1 for t in tokens]
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("qwen2")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_eos_token_id(special["<|endoftext|>"])
    wr.add_pad_token_id(special["<|endoftext|>"])
    wr.add_add_bos_token(False)
    wr.add_add_eos_token(add_eos)
    return vocab


def write_pooling_gguf(folder, path, rerank):
    """folder: tests/golden/models/qwen3_embed or qwen3_rerank; path: the .gguf to write."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    tensors = {k if k.startswith(("model.", "lm_head.")) else "model." + k: v for k, v in tensors.items()}
    tmp = path + ".tmp"
    wr = gguf.GGUFWriter(tmp, "qwen3")
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_key_length(cfg["head_dim"])
    wr.add_value_length(cfg["head_dim"])
    wr.add_file_type(0)  # ALL_F32
    wr.add_pooling_type(gguf.PoolingType.RANK if rerank else gguf.PoolingType.LAST)
    vocab = add_tokenizer(wr, folder, add_eos=not rerank)
    if rerank:
        wr.add_classifier_output_labels(["yes", "no"])
        wr.add_string("tokenizer.chat_template.rerank", RERANK_TEMPLATE)
    for name, a in tensors.items():
        if name == "model.embed_tokens.weight":
            wr.add_tensor("token_embd.weight", a)
        elif name == "model.norm.weight":
            wr.add_tensor("output_norm.weight", a)
        elif name == "lm_head.weight":
            # llama.cpp keeps the two rows the reranker is scored with, "yes" first.
            wr.add_tensor("cls.output.weight", np.ascontiguousarray(a[[vocab["yes"], vocab["no"]]]))
        else:
            parts = name.split(".")
            layer, rest, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
            wr.add_tensor(f"blk.{layer}.{GGUF_NAMES[rest]}.{kind}", np.ascontiguousarray(a))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    os.replace(tmp, path)
