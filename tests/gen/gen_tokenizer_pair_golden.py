"""gen_tokenizer_pair_golden.py — writes tests/golden/tokenizer/pairs.json: how the reference
tokenizers (Hugging Face `tokenizers`) encode text pairs, encode(a, b), for the pair tests of
tests/unit/test_tokenizer_pair.cpp.

    build/venv/bin/python tests/gen/gen_tokenizer_pair_golden.py

For each fixture tokenizer (build/fixtures/tokenizers/<name>, see tests/gen/fixture_files.py)
and each pair: the ids with and without special tokens, and each text's ids alone without them.
"variants" are the tiny XLM-R tokenizer of tests/golden/models/xlmr_rerank with its
post-processor replaced (Bert, Roberta, Sequence, none), so that every post-processor kind has
a reference; "singles" are single texts through the same variants, where a Sequence's stages
see each other's output.
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_reference as ref  # noqa: E402

OUT = ref.REPO / "tests" / "golden" / "tokenizer" / "pairs.json"
TINY = ref.REPO / "tests" / "golden" / "models" / "xlmr_rerank" / "tokenizer.json"

PAIRS = [
    ("What is the capital of China?", "The capital of China is Beijing."),
    ("Explain gravity", "Gravity is a force that attracts two bodies towards each other."),
    ("東京", "日本の首都は東京です。"),
    ("Привет, мир!", "Как дела?"),
    ("a <s> b", "c </s> d <pad>"),
    ("  leading and  inner  spaces ", "\ttabs\nand newlines\r\n"),
    ("x", "y"),
    ("", "only a document"),
    ("only a query", ""),
    ("", ""),
    ("emoji 🚀 and ｆｕｌｌ width", "naïve café"),
]

# The tiny tokenizer's specials: <s> 0, <pad> 1, </s> 2.
TEMPLATE = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "</s>", "type_id": 1}},
                     {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<pad>", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]},
                               "<pad>": {"id": "<pad>", "ids": [1], "tokens": ["<pad>"]}}}
BERT = {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}
ROBERTA = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
           "add_prefix_space": True}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
VARIANTS = {
    "bert": BERT,
    "roberta": ROBERTA,
    "template_reordered": TEMPLATE,
    "byte_level": BYTE_LEVEL,
    "none": None,
    "sequence_byte_level_roberta": {"type": "Sequence", "processors": [BYTE_LEVEL, ROBERTA]},
    "sequence_roberta_bert": {"type": "Sequence", "processors": [ROBERTA, BERT]},
    "sequence_template_roberta": {"type": "Sequence", "processors": [TEMPLATE, ROBERTA]},
}
# A template after a template sees two sequences for a single text; for a pair the reference
# has no answer (it panics), so that variant is single-only.
SINGLE_ONLY = {"sequence_template_template": {"type": "Sequence", "processors": [TEMPLATE, TEMPLATE]}}


def pair_golden(tok):
    return {"ids": [tok.encode(a, b).ids for a, b in PAIRS],
            "ids_plain": [tok.encode(a, b, add_special_tokens=False).ids for a, b in PAIRS],
            "a_plain": [tok.encode(a, add_special_tokens=False).ids for a, _ in PAIRS],
            "b_plain": [tok.encode(b, add_special_tokens=False).ids for _, b in PAIRS]}


def with_post_processor(base, post_processor):
    from tokenizers import Tokenizer
    j = dict(base)
    j["post_processor"] = post_processor
    return Tokenizer.from_str(json.dumps(j))


def main():
    import tokenizers
    fixtures = {}
    for name in ref.FIXTURE_NAMES:
        if not ref.available(name):
            sys.exit(f"missing fixture {name}: run python3 tests/gen/fixture_files.py")
        fixtures[name] = pair_golden(ref.reference(name))
    base = json.loads(TINY.read_text(encoding="utf-8"))
    variants = {}
    for name, pp in VARIANTS.items():
        variants[name] = {"post_processor": pp, **pair_golden(with_post_processor(base, pp))}
    singles = {}
    texts = [a for a, _ in PAIRS]
    for name, pp in {**VARIANTS, **SINGLE_ONLY}.items():
        tok = with_post_processor(base, pp)
        singles[name] = {"post_processor": pp, "ids": [tok.encode(t).ids for t in texts]}
    golden = {"reference": f"tokenizers=={tokenizers.__version__}", "tiny_tokenizer": "tests/golden/models/xlmr_rerank",
              "pairs": [list(p) for p in PAIRS], "fixtures": fixtures, "variants": variants, "singles": singles}
    OUT.write_text(json.dumps(golden, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
