"""tokenizer_synthetic.py — small BPE tokenizers trained with Hugging Face `tokenizers` on the
oracle corpus, one per pipeline shape the fixtures do not cover (Metaspace schemes, legacy
SentencePiece normalizers, Bert/Roberta processors, subword prefixes and suffixes, split
behaviors, added-token options, ignore_merges, ...). The oracle test writes each one to a
tokenizer.json and compares sparkd with the reference on the same file.
"""
import json


def _trainer(vocab_size=1500, special=(), byte_level=False, byte_tokens=False, **kw):
    from tokenizers import pre_tokenizers, trainers
    special = list(special) + ([f"<0x{b:02X}>" for b in range(256)] if byte_tokens else [])
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
    return trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, initial_alphabet=alphabet,
                               show_progress=False, **kw)


def build(texts):
    """Returns {name: tokenizer.json text} for every synthetic pipeline."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    out = {}

    def finish(name, tok, trainer, patch=None, after=None):
        tok.train_from_iterator(texts, trainer)
        if after:
            after(tok)  # added tokens go in after training, so their ids follow the model's
        j = json.loads(tok.to_str())
        if patch:
            patch(j)
        out[name] = json.dumps(j, ensure_ascii=False)

    sp_special = ["<unk>", "<s>", "</s>"]

    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    t.decoder = decoders.Metaspace(prepend_scheme="first")
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    finish("sp_metaspace_first", t, _trainer(special=sp_special, byte_tokens=True))

    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=False)
    t.decoder = decoders.Metaspace(prepend_scheme="always", split=False)
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    finish("sp_metaspace_always_nosplit", t, _trainer(special=sp_special, byte_tokens=True))

    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    finish("sp_legacy_llama2", t, _trainer(special=sp_special, byte_tokens=True))

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    finish("bytelevel_prefix_roberta", t, _trainer(special=["<s>", "<pad>", "</s>", "<mask>"], byte_level=True))

    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece(prefix="##")
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    finish("bert_like_prefix", t, _trainer(special=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
                                           continuing_subword_prefix="##"))

    t = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    finish("nfkc_lower_suffix", t, _trainer(special=["<unk>"], end_of_word_suffix="</w>"))

    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Strip(),
                                         normalizers.Replace(Regex(r"\s+"), " ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Punctuation("merged_with_previous"),
                                               pre_tokenizers.Digits(individual_digits=False),
                                               pre_tokenizers.WhitespaceSplit()])
    finish("split_behaviors", t, _trainer(special=["<unk>"]))

    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.NFKD()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", "merged_with_next"),
        pre_tokenizers.Split(Regex(r"[aeiou]+"), "contiguous", invert=True),
        pre_tokenizers.Split(Regex(r"\d"), "removed"),
        pre_tokenizers.CharDelimiterSplit("x")])
    t.decoder = decoders.Sequence([decoders.Strip("a", 1, 0), decoders.Replace(Regex("[0-9]"), "#")])
    finish("split_invert_delims", t, _trainer(special=["<unk>"]))

    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Lowercase()
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()

    def add_options(tok):
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True),
                                AddedToken("<|sep|>", rstrip=True, normalized=False, special=True),
                                AddedToken("<|im_start|>", normalized=False, special=True)])
        tok.add_tokens([AddedToken("hello", single_word=True, normalized=True),
                        AddedToken("Wörld", normalized=True),
                        AddedToken(" the", lstrip=True, rstrip=True, normalized=False),
                        AddedToken("<think>", normalized=False), AddedToken("ab", single_word=True, normalized=False),
                        AddedToken("<|im", normalized=False), AddedToken("ing ", rstrip=True, normalized=True),
                        AddedToken("δοκιμή", single_word=True, lstrip=True, normalized=True)])
    finish("added_token_options", t, _trainer(byte_level=True), after=add_options)

    def ignore_merges(j):
        j["model"]["ignore_merges"] = True
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.TemplateProcessing(single="<|bos|> $A <|eos|>",
                                                                          special_tokens=[("<|bos|>", 0), ("<|eos|>", 1)])])
    finish("ignore_merges_llama3_style", t, _trainer(special=["<|bos|>", "<|eos|>"], byte_level=True), ignore_merges)

    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"[0-9]"), "0")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.Metaspace(replacement="_", prepend_scheme="never")])
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="_", prepend_scheme="never"), decoders.Fuse()])
    finish("digits_metaspace_custom", t, _trainer(vocab_size=600, special=["<unk>"]))
    return out
