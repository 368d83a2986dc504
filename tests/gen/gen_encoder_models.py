#!/usr/bin/env python3
"""Writes a tiny XLM-RoBERTa embedder (BAAI/bge-m3 style) and a tiny XLM-RoBERTa cross-encoder
(BAAI/bge-reranker-v2-m3 style) with their golden outputs from Hugging Face transformers (f32, CPU):

  tests/golden/models/xlmr_embed/   XLMRobertaModel without the pooler (as bge-m3 publishes it),
      config.json's architectures ["XLMRobertaModel"], sentence-transformers' modules.json and
      1_Pooling/config.json (CLS pooling, Normalize);
      golden.json: texts, their ids (with <s> ... </s>) and embeddings (last_hidden_state at
      <s>, L2-normalised)
  tests/golden/models/xlmr_rerank/  XLMRobertaForSequenceClassification with one label
      (roberta.*, classifier.dense.*, classifier.out_proj.*);
      golden.json: (query, document) pairs, their ids as the tokenizer's pair form gives them
      (<s> query </s></s> document </s>), the raw logit and score = sigmoid(logit), what
      sentence-transformers' CrossEncoder and vLLM report for a one-label model

Both share one Unigram tokenizer made here with HF `tokenizers` in XLM-R's layout: <s>=0, <pad>=1,
</s>=2, <unk>=3, then a few hundred SentencePiece-style pieces ("▁"-prefixed words, letters, some
Cyrillic and CJK characters; no byte pieces, so other characters become <unk>) and <mask> last;
NFKC then runs of spaces made one, Metaspace (prepend "always"), and XLM-R's post-processor as a
TemplateProcessing. Token type ids are 0 throughout (type_vocab_size 1), so none are passed.
RoBERTa numbers positions from pad_token_id + 1 = 2, hence max_position_embeddings = 64 + 2.
tests/gen/gguf_encoder.py writes both as llama.cpp-layout GGUF files.

Weights are stored in BF16 and the golden run reads them back in f32, so it sees exactly the
stored values.

Run where torch is installed (CI has none, so the outputs are committed):
  python tests/gen/gen_encoder_models.py [--out tests/golden/models]
"""
import argparse
import json
import math
import os
import random

import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaModel

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
HIDDEN = 32
MAX_TOKENS = 64

WORDS = """the of and to a in is that for it as was with be on not he by are this at from or have an they which
one you were her all she there would their we him been has when who will more no if out so said what up its about
into than them can only other new some could time these two may then do first any my now such like our over man me
even most made after also did many before must through back years where much your way well down should because each
just those people how too little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since against go came right
used take three capital France Paris city country river China Beijing Japan Tokyo gravity force attracts bodies
towards weight physical objects answer question query passage document search relevant retrieve model text language
water ocean cold hot reverse list Python code explain cat dog house tree small large blue sky""".split()
# Word pieces that are not whole words: the segmentation then has choices to make.
SUBWORDS = ["ing", "ed", "er", "est", "ly", "tion", "s", "es", "re", "un", "al", "an", "en", "in", "on", "at", "or",
            "ar", "ic", "ity", "ment", "ness", "th", "ch", "sh", "qu", "ou", "ea", "ai", "ie"]
LETTERS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()\"/[]*=#&")
ACCENTED = list("éèàüöäñçß")
CYRILLIC = ["▁Привет", "▁мир", "▁как", "▁дела"] + list("абвгдежзийклмнопрстуфхцчшщыьэюя")
CJK = ["▁日本", "東京", "▁東京"] + list("日本の首都は東京です。中国北京天气今很好我爱")

TEXTS = [
    "The capital of France is Paris.",
    "what is gravity?",
    "Gravity is a force that attracts two bodies towards each other.",
    "日本の首都は東京です。",
    "Привет, мир! Как дела?",
    "Crème brûlée, naïve façade — ｆｕｌｌ width 🚀",
    "x",
    "  spaces   before, inside  and after  ",
    "A longer passage about the river and the ocean, the city and the country, repeated to make many tokens: "
    "the cold water of the river runs into the large blue ocean, and the people of the city know it well.",
]

RERANK = [
    ("What is the capital of China?", "The capital of China is Beijing."),
    ("What is the capital of China?", "Gravity is a force that attracts two bodies towards each other."),
    ("Explain gravity", "Gravity is a force that attracts two bodies towards each other. It gives weight to physical objects."),
    ("How do I reverse a list in Python?", "xs[::-1] or xs.reverse()"),
    ("東京", "日本の首都は東京です。"),
    ("x", "y"),
]


def pieces():
    """(piece, score) in id order after the four specials: log-probabilities that make whole
    words beat their spellings, with a seeded jitter so ties do not decide anything."""
    rng = random.Random(7)
    out, seen = [], set()

    def add(piece, score):
        if piece not in seen:
            seen.add(piece)
            out.append((piece, round(score + rng.uniform(-0.3, 0.3), 4)))

    add("▁", -3.0)
    for i, w in enumerate(WORDS):
        add("▁" + w, -5.0 - 3.0 * i / len(WORDS))
    for w in ["The", "What", "How", "Explain", "Gravity", "It", "A", "I", "Crème", "brûlée", "naïve", "façade"]:
        add("▁" + w, -7.0)
    for s in SUBWORDS:
        add(s, -8.0)
    for c in CYRILLIC + CJK:
        add(c, -9.0 if len(c) == 1 else -7.5)
    for c in LETTERS + ACCENTED:
        add(c, -10.0)
        add("▁" + c, -10.5)
    return out


def make_tokenizer():
    # <mask> closes the piece list too, as in XLM-R's vocabulary.
    vocab = [(s, 0.0) for s in SPECIALS] + pieces() + [("<mask>", 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    # XLM-R's normalizer is its SentencePiece charsmap (NFKC-like) and then runs of spaces made one.
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    # XLM-R's RobertaProcessing, written as the TemplateProcessing its tokenizer.json carries:
    # type id 0 for both sequences.
    tok.post_processor = processors.TemplateProcessing(single="<s>:0 $A:0 </s>:0", pair="<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
    return tok


def write_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    mask = tok.token_to_id("<mask>")
    decoder = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, s in enumerate(SPECIALS)}
    decoder[str(mask)] = {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": decoder, "bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>",
                   "mask_token": "<mask>", "model_max_length": MAX_TOKENS, "pad_token": "<pad>", "sep_token": "</s>",
                   "unk_token": "<unk>", "clean_up_tokenization_spaces": True,
                   "tokenizer_class": "XLMRobertaTokenizer"}, f, indent=1)


def config(vocab_size, **extra):
    return XLMRobertaConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=MAX_TOKENS + 2, type_vocab_size=1,
                            hidden_act="gelu", layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                            **extra)


def randomize(model, gen):
    # Every parameter random, LayerNorm gains near 1 and biases small, matrices scaled by
    # 1/sqrt(fan_in): outputs stay well inside the activations' interesting range.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "embeddings" in name or "out_proj" in name:
                # The score head unscaled too, so that the pairs' logits spread over a few units.
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))


def save(model, out, architecture):
    os.makedirs(out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["architectures"] = [architecture]
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    gen_cfg = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)  # an encoder generates nothing


def check_hf_tokenizer(out, tok):
    # transformers' own loading of the folder must tokenize as the `tokenizers` object does.
    # transformers 5's XLMRobertaTokenizer rebuilds its pipeline from the vocabulary (no
    # normalizer, split on whitespace), so texts that normalizing or edge spaces change are left
    # out here; the golden ids are `tokenizers`' own.
    hf = transformers.AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        if tok.normalizer.normalize_str(text) == text and text == text.strip():
            assert hf(text)["input_ids"] == tok.encode(text).ids, text
    for q, d in RERANK:
        assert hf(q, d)["input_ids"] == tok.encode(q, d).ids, (q, d)


def reference():
    return f"transformers {transformers.__version__}, torch {torch.__version__}, f32, eager attention"


def gen_embedder(tok, out):
    model = XLMRobertaModel(config(tok.get_vocab_size()), add_pooling_layer=False)
    randomize(model, torch.Generator().manual_seed(5151))
    save(model, out, "XLMRobertaModel")
    write_tokenizer(tok, out)
    check_hf_tokenizer(out, tok)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f, indent=1)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                   "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False, "include_prompt": True}, f, indent=1)
    model = XLMRobertaModel.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                            add_pooling_layer=False).eval()
    ids, vectors = [], []
    with torch.no_grad():
        for text in TEXTS:
            enc = tok.encode(text).ids
            assert len(enc) <= MAX_TOKENS, (text, len(enc))
            h = model(torch.tensor([enc])).last_hidden_state[0, 0]
            vectors.append(torch.nn.functional.normalize(h, dim=-1).tolist())
            ids.append(enc)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference(), "pooling": "cls", "texts": TEXTS, "ids": ids, "embeddings": vectors}, f, indent=1)
    print("xlmr_embed", [len(i) for i in ids])


def gen_reranker(tok, out):
    model = XLMRobertaForSequenceClassification(config(tok.get_vocab_size(), num_labels=1))
    # A seed whose pairs' logits straddle 0, where the sigmoid is steep and the score says the most.
    randomize(model, torch.Generator().manual_seed(6271))
    save(model, out, "XLMRobertaForSequenceClassification")
    write_tokenizer(tok, out)
    check_hf_tokenizer(out, tok)
    model = XLMRobertaForSequenceClassification.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    cases = []
    with torch.no_grad():
        for query, document in RERANK:
            enc = tok.encode(query, document).ids
            assert len(enc) <= MAX_TOKENS, (query, len(enc))
            logit = model(torch.tensor([enc])).logits[0, 0].item()
            cases.append({"query": query, "document": document, "ids": enc, "logit": logit,
                          "score": 1.0 / (1.0 + math.exp(-logit))})
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"reference": reference(), "activation": "sigmoid", "cases": cases}, f, indent=1)
    print("xlmr_rerank", [len(c["ids"]) for c in cases], [round(c["logit"], 4) for c in cases])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    tok = make_tokenizer()
    gen_embedder(tok, os.path.join(args.out, "xlmr_embed"))
    gen_reranker(tok, os.path.join(args.out, "xlmr_rerank"))


if __name__ == "__main__":
    main()
