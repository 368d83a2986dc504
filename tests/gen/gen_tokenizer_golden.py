"""gen_tokenizer_golden.py — writes tests/golden/tokenizer/ from the reference tokenizers.

    build/venv/bin/python tests/gen/gen_tokenizer_golden.py

corpus.json.gz holds the corpus (strings with ill-formed UTF-8 kept via surrogateescape);
<name>.json.gz holds, per corpus entry, the reference ids with and without special tokens,
with special-token text read literally, and the reference decode of the ids with and
without skip_special_tokens; plus random id sequences and their reference decodes.
"""
import gzip
import json
import pathlib
import random
import sys
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_corpus  # noqa: E402
import tokenizer_reference as ref  # noqa: E402

OUT = ref.REPO / "tests" / "golden" / "tokenizer"
RANDOM_ID_SEQUENCES = 300


def corpus_texts(raw):
    return [b.decode("utf-8", "replace") for b in raw]


def random_id_sequences(tok, seed):
    """Random ids, biased towards byte tokens, special tokens and ids past the vocabulary."""
    rng = random.Random(seed)
    size = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_ids = sorted(i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x") and t.endswith(">"))
    special = sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
    out = []
    for _ in range(RANDOM_ID_SEQUENCES):
        seq = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.2 and byte_ids:
                seq.append(rng.choice(byte_ids))
            elif r < 0.3 and special:
                seq.append(rng.choice(special))
            elif r < 0.32:
                seq.append(size + rng.randint(0, 10))
            else:
                seq.append(rng.randrange(size))
        out.append(seq)
    return out


def golden_for(name, texts):
    tok = ref.reference(name)
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    literal = ref.encode_literal(tok, texts)
    cases = []
    for i in range(len(texts)):
        c = {"ids": ids[i], "text": tok.decode(ids[i], skip_special_tokens=False),
             "text_skip": tok.decode(ids[i], skip_special_tokens=True)}
        if plain[i] != ids[i]:
            c["ids_plain"] = plain[i]
        if literal[i] != ids[i]:
            c["ids_literal"] = literal[i]
        cases.append(c)
    rand = [{"ids": s, "text": tok.decode(s, skip_special_tokens=False),
             "text_skip": tok.decode(s, skip_special_tokens=True)}
            for s in random_id_sequences(tok, zlib.crc32(name.encode()) + tokenizer_corpus.SEED)]
    import tokenizers
    return {"tokenizer": name, "reference": f"tokenizers=={tokenizers.__version__}", "cases": cases, "random_ids": rand}


def write(path, obj):
    # mtime=0 keeps the files byte-identical when the reference output has not changed.
    data = json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(data)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    raw = tokenizer_corpus.corpus()
    write(OUT / "corpus.json.gz", [b.decode("utf-8", "surrogateescape") for b in raw])
    texts = corpus_texts(raw)
    for name in ref.ALL_NAMES:
        if not ref.available(name):
            print(f"skip {name}: files not found")
            continue
        write(OUT / f"{name}.json.gz", golden_for(name, texts))
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
