#!/usr/bin/env python3
"""Writes a tiny Qwen3-Embedding-style embedder and a tiny Qwen3-Reranker-style reranker with
their golden outputs from Hugging Face transformers (f32, CPU):

  tests/golden/models/qwen3_embed/   the base model alone (Qwen3Model saved as the Qwen3-Embedding
      checkpoints are: no `model.` prefix, no LM head) under config.json's Qwen3ForCausalLM, a
      tokenizer whose post-processor appends <|endoftext|>, and sentence-transformers'
      modules.json + 1_Pooling/config.json (last-token pooling, Normalize);
      golden.json: texts and their embeddings (last_hidden_state at the last token, L2-normalised)
  tests/golden/models/qwen3_rerank/  a Qwen3ForCausalLM with an LM head whose vocabulary has the
      tokens "yes" and "no"; golden.json: (instruction, query, document) triples, the prompt in the
      format of Qwen3-Reranker's model card, and the score P(yes) = softmax(logits[no, yes])[yes]
      at the prompt's last token

Both share one byte-level BPE tokenizer made here with HF `tokenizers` (256 byte tokens, the merges
that make "yes" and "no", three special tokens). Weights are stored in BF16 and the golden run
reads them back in f32, so it sees exactly the stored values.

Run where torch is installed (CI has none, so the outputs are committed):
  python tests/gen/gen_pooling_models.py [--out tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3Model

from gen_tiny_models import randomize

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 272  # 256 bytes + 3 merges + 3 specials, padded

TEXTS = [
    "The capital of France is Paris.",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: what is gravity?",
    "Gravity is a force that attracts two bodies towards each other.",
    "日本の首都は東京です。 🚀",
    "x",
    "A longer passage about yes and no answers, repeated to pass several blocks of the cache: " * 4,
]

RERANK = [
    ("Given a web search query, retrieve relevant passages that answer the query", "What is the capital of China?",
     "The capital of China is Beijing."),
    ("Given a web search query, retrieve relevant passages that answer the query", "What is the capital of China?",
     "Gravity is a force that attracts two bodies towards each other."),
    ("Given a web search query, retrieve relevant passages that answer the query", "Explain gravity",
     "Gravity is a force that attracts two bodies towards each other. It gives weight to physical objects."),
    ("Judge whether the code answers the question", "How do I reverse a list in Python?", "xs[::-1] or xs.reverse()"),
    ("Given a web search query, retrieve relevant passages that answer the query", "東京", "日本の首都は東京です。"),
]


def reranker_prompt(instruction, query, document):
    # Qwen3-Reranker's model card: the system turn asking for yes or no, the pair, and an
    # empty thinking block opening the assistant's turn.
    prefix = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
              "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    return prefix + f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}" + suffix


def make_tokenizer(append_eos):
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [("y", "e"), ("ye", "s"), ("n", "o")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    if append_eos:
        eos = tok.token_to_id("<|endoftext|>")
        tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
                                                           special_tokens=[("<|endoftext|>", eos)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size() <= VOCAB
    return tok


def write_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "model_max_length": 512}, f, indent=1)


def config():
    return Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
                       tie_word_embeddings=False, bos_token_id=None, eos_token_id=0,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def fix_config(out, eos):
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["architectures"] = ["Qwen3ForCausalLM"]  # as Qwen3-Embedding and Qwen3-Reranker publish theirs
    cfg["eos_token_id"] = eos
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def reference():
    return f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager attention"


def gen_embedder(base, out):
    tok = make_tokenizer(append_eos=True)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    base.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    fix_config(out, tok.token_to_id("<|endoftext|>"))
    write_tokenizer(tok, out)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f, indent=1)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 64, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                   "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True, "include_prompt": True}, f, indent=1)
    model = Qwen3Model.from_pretrained(out, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    ids, vectors = [], []
    with torch.no_grad():
        for text in TEXTS:
            enc = tok.encode(text).ids
            h = model(torch.tensor([enc])).last_hidden_state[0, -1]
            vectors.append(torch.nn.functional.normalize(h, dim=-1).tolist())
            ids.append(enc)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference(), "texts": TEXTS, "ids": ids, "embeddings": vectors}, f, indent=1)
    print("qwen3_embed", [len(i) for i in ids])


def gen_reranker(lm, out):
    tok = make_tokenizer(append_eos=False)
    os.makedirs(out, exist_ok=True)
    lm.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    fix_config(out, tok.token_to_id("<|endoftext|>"))
    write_tokenizer(tok, out)
    model = Qwen3ForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    yes, no = tok.token_to_id("yes"), tok.token_to_id("no")
    cases = []
    with torch.no_grad():
        for instruction, query, document in RERANK:
            enc = tok.encode(reranker_prompt(instruction, query, document)).ids
            logits = model(torch.tensor([enc])).logits[0, -1]
            score = torch.softmax(torch.stack([logits[no], logits[yes]]), dim=0)[1].item()
            cases.append({"instruction": instruction, "query": query, "document": document, "ids": enc, "score": score})
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference(), "yes": yes, "no": no, "cases": cases}, f, indent=1)
    print("qwen3_rerank", [len(c["ids"]) for c in cases], [round(c["score"], 4) for c in cases])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    lm = Qwen3ForCausalLM(config())
    randomize(lm, torch.Generator().manual_seed(4242))
    # Round once to bf16, so that the embedder's and the reranker's files hold the same values.
    lm = lm.to(torch.bfloat16).to(torch.float32)
    gen_embedder(lm.model, os.path.join(args.out, "qwen3_embed"))
    gen_reranker(lm, os.path.join(args.out, "qwen3_rerank"))


if __name__ == "__main__":
    main()
