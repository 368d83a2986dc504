"""tokenizer_reference.py — builds the reference tokenizers (Hugging Face `tokenizers`) that the
oracle tests compare sparkd with, and locates their files.

The fixture tokenizers (four BPE ones and xlmr, a SentencePiece Unigram with a precompiled
charsmap) are loaded from their tokenizer.json. The default SmolLM2 model
ships only as a GGUF file, so its reference is rebuilt from the GGUF metadata: the `gguf`
package reads tokens, merges and token types, and a `tokenizers` byte-level BPE is assembled
the way Hugging Face's tokenizer.json for HuggingFaceTB/SmolLM2-135M-Instruct defines it
(GGUF pre-tokenizer "smollm"): pre-tokenizer Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel decoder and post-processor,
no BOS added, and the 17 control tokens (<|endoftext|>, <|im_start|>, ...) as special
added tokens that are not normalized.
"""
import pathlib

import fixture_files

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_NAMES = ["qwen3", "llama3_1", "gptoss", "gemma3", "xlmr"]
ALL_NAMES = FIXTURE_NAMES + ["smollm2"]
SMOLLM2_GGUF = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def fixtures_dir() -> pathlib.Path:
    return fixture_files.fixtures_dir()


def model_path(name: str) -> pathlib.Path:
    """What `sparkd tokenize --model` takes for this tokenizer."""
    if name == "smollm2":
        return SMOLLM2_GGUF
    return fixtures_dir() / "tokenizers" / name


def available(name: str) -> bool:
    p = model_path(name)
    return p.exists() and (name == "smollm2" or (p / "tokenizer.json").exists())


def _gguf_strings(reader, key):
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _gguf_ints(reader, key):
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def smollm2_reference(path=SMOLLM2_GGUF):
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    reader = gguf.GGUFReader(str(path))
    tokens = _gguf_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _gguf_strings(reader, "tokenizer.ggml.merges")]
    types = _gguf_ints(reader, "tokenizer.ggml.token_type")
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, ty in enumerate(types) if ty == 3])
    return tok


def reference(name: str):
    from tokenizers import Tokenizer
    if name == "smollm2":
        return smollm2_reference()
    return Tokenizer.from_file(str(model_path(name) / "tokenizer.json"))


def encode_literal(tok, texts, add_special_tokens=True):
    """Encodes with special-token text treated as plain text (sparkd's parse_special=false)."""
    tok.encode_special_tokens = True
    try:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special_tokens)]
    finally:
        tok.encode_special_tokens = False
