#!/usr/bin/env python3
"""Golden splits of gpt-oss completions by the `openai-harmony` package's StreamableParser.

Each completion (hand-written and generated: reasoning, answers, tool calls addressed
before or after the channel, preambles, a truncated stream, a stray special token, text
that is not harmony) is tokenized with harmony's own o200k encoding and fed token by token
to StreamableParser(role=assistant). Its messages become OpenAI's fields: the analysis
channel reasoning_content; final, and commentary addressed to no one, content; a message
addressed to=functions.NAME a tool call (NAME, its text as arguments). What the parser
leaves unfinished (a message cut off) is its channel's text, a cut-off call content; what
it refuses (text where a message start must come) and text that never opens a message are
content, so nothing is lost.

openai-harmony loads o200k_base.tiktoken from TIKTOKEN_ENCODINGS_BASE; this script writes
that file from the gpt-oss tokenizer.json of tests/fixtures (byte-level BPE: each token's
string mapped back to bytes, its id its rank) into a temporary folder.

  python tests/gen/gen_harmony_golden.py [--out tests/golden/harmony/parser.json]
"""
import argparse
import base64
import json
import os
import random
import tempfile
from pathlib import Path

import fixture_files

REPO = Path(__file__).resolve().parents[2]


def write_o200k(folder, tokenizer_json=None):
    """o200k_base.tiktoken (base64 token bytes, rank) from a byte-level BPE tokenizer.json
    (by default gpt-oss's fixture)."""
    tokenizer_json = tokenizer_json or fixture_files.fixtures_dir() / "tokenizers" / "gptoss" / "tokenizer.json"
    vocab = json.loads(Path(tokenizer_json).read_text())["model"]["vocab"]
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    byte_of, extra = {chr(b): b for b in printable}, 0
    for b in range(256):
        if b not in printable:
            byte_of[chr(256 + extra)] = b
            extra += 1
    lines = [f"{base64.b64encode(bytes(byte_of[c] for c in s)).decode()} {i}\n"
             for s, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i < 199998]
    (Path(folder) / "o200k_base.tiktoken").write_text("".join(lines))


def encoding():
    folder = tempfile.mkdtemp()
    write_o200k(folder)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = folder
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def split(enc, text):
    from openai_harmony import Role, StreamableParser
    tokens = enc.encode(text, allowed_special="all")
    parser = StreamableParser(enc, role=Role.ASSISTANT)
    refused_at = None
    for i, t in enumerate(tokens):
        try:
            parser.process(t)
        except Exception:  # not harmony from here on
            refused_at = i
            break
    out = {"reasoning": "", "content": "", "tool_calls": []}

    def add(channel, recipient, body, complete):
        if recipient and complete:
            name = recipient[len("functions."):] if recipient.startswith("functions.") else recipient
            out["tool_calls"].append({"name": name, "arguments": body})
        elif channel == "analysis":
            out["reasoning"] += body
        else:
            out["content"] += body

    for m in parser.messages:
        add(m.channel, m.recipient, "".join(c.text for c in m.content), True)
    if refused_at is not None:
        out["content"] += enc.decode(tokens[refused_at:])
    elif parser.current_channel is not None or parser.current_content:
        add(parser.current_channel, parser.current_recipient, parser.current_content, False)
    elif not parser.messages and "<|" not in text:
        out["content"] += text  # never a header: the whole text is the answer
    return out


def completions(seed=2400):
    fixed = [
        "<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
        "<|channel|>final<|message|>Only an answer.<|return|>",
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
        " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>",
        "<|channel|>analysis<|message|>Two calls.<|end|><|start|>assistant to=functions.a<|channel|>commentary json<|message|>{}<|call|>",
        "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
        "<|channel|>analysis<|message|>Thinking about é, 中文 and emoji 🙂<|end|><|start|>assistant<|channel|>final<|message|>ünïcödé<|return|>",
        "<|channel|>analysis<|message|>cut off in the middle of reason",
        "<|channel|>analysis<|message|>done<|end|><|start|>assistant<|channel|>final<|message|>partial answ",
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1",
        "<|channel|>final<|message|>hello<|start|>world<|return|>",
        "<|channel|>final<|message|>a <|channel|> inside<|return|>",
        "just plain text, no harmony at all",
        "<|channel|>final<|message|>a<|end|>junk after the end",
        "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|><|return|>",
        "<|channel|>analysis<|message|>line one\nline two\n\n<|end|><|start|>assistant<|channel|>final<|message|>  spaced  \n<|return|>",
    ]
    rng = random.Random(seed)
    words = ["alpha", "beta", " gamma", "δ", "ε ", "{", "}", "\"k\"", ":", "42", "\n", "<", "|", ">", "to=", "x y"]
    generated = []
    for _ in range(24):
        parts = []
        for _ in range(rng.randint(1, 4)):
            body = "".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
            kind = rng.choice(["analysis", "final", "call", "preamble"])
            head = {"analysis": "<|channel|>analysis", "final": "<|channel|>final", "preamble": "<|channel|>commentary",
                    "call": f"<|channel|>commentary to=functions.tool_{rng.randint(0, 9)} <|constrain|>json"}[kind]
            end = "<|call|>" if kind == "call" else rng.choice(["<|end|>", "<|return|>"]) if kind == "final" else "<|end|>"
            parts.append(head + "<|message|>" + body + end)
        text = "<|start|>assistant".join(parts)
        if rng.random() < 0.3:
            text = text[:rng.randint(1, len(text))]  # a stream cut off anywhere, even inside a token
        generated.append(text)
    return fixed + generated


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "golden" / "harmony" / "parser.json"))
    args = ap.parse_args()
    enc = encoding()
    cases = [{"completion": c, "expected": split(enc, c)} for c in completions()]
    import openai_harmony
    meta = {"reference": f"openai-harmony {getattr(openai_harmony, '__version__', '0.0.8')} StreamableParser",
            "cases": cases}
    Path(args.out).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
