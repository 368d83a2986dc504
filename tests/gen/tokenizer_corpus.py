"""tokenizer_corpus.py — the deterministic corpus of strings the tokenizer oracle tests use.

Each entry is raw bytes (most are UTF-8 text; some hold ill-formed UTF-8 on purpose). The
reference tokenizer receives `raw.decode("utf-8", "replace")`, which is how sparkd reads
ill-formed input too. `python tests/gen/tokenizer_corpus.py` prints a summary.
"""
import random

SEED = 20261121

LATIN = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? I'm fine; we'll see, they'd've known.",
    "DON'T SHOUT. It's JOHN'S car, isn't it? You're right, we've 'quoted' it.",
    "Ça va? Où est la bibliothèque? Voilà, déjà vu — naïve façade.",
    "Grüße aus Köln: Straße, Fußgänger, Äpfel, Öl, Übermut.",
    "¿Dónde está el niño? ¡Qué mañana tan español!",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Γειά σου Κόσμε!",
    "İstanbul'da ılık bir gün; Iğdır, şişe, çiçek.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "camelCaseWord snake_case_word kebab-case-word SCREAMING_SNAKE PascalCase",
    "e.g. i.e. etc. Mr. Mrs. Dr. St. U.S.A. a.m. p.m.",
    "It’s a “smart quote” test – with en dash — and em dash… and ‘single’ ones.",
    "ﬁne ﬂour ﬀ ǅ ǈ Ⅻ ⅻ ½ ¼ ² ³ ¹ ª º µ ℃ № ™ ℡",
]
CJK = [
    "我爱自然语言处理。今天天气很好，我们去公园散步吧！",
    "東京は日本の首都です。ひらがな、カタカナ、漢字が混ざっています。",
    "안녕하세요, 세계! 한국어 텍스트도 토큰화해야 합니다.",
    "中文标点符号：“引号”、《书名号》、【方括号】……",
    "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３　！？",
    "𠀀𠀁𪚥 rare CJK extension B characters 𫝀",
    "ﾊﾝｶｸｶﾀｶﾅ half-width katakana ｶﾞｷﾞ",
]
RTL_INDIC = [
    "مرحبا بالعالم! كيف حالك اليوم؟ النص العربي مع تشكيل: مُحَمَّد",
    "שלום עולם! זהו טקסט בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है। क्षत्रिय, ज्ञान, श्री",
    "বাংলা ভাষা সুন্দর। தமிழ் மொழி. తెలుగు భాష. ಕನ್ನಡ",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "ሰላም ለዓለም። Ἀρχὴ σοφίας. ᚠᚢᚦᚨᚱᚲ runes",
]
EMOJI = [
    "I love pizza 🍕 and tacos 🌮!",
    "Family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍💋‍👨 rainbow flag: 🏳️‍🌈",
    "Skin tones: 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 👋🏽",
    "Flags: 🇺🇸 🇫🇷 🇯🇵 🇩🇪 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Keycaps: 1️⃣ #️⃣ *️⃣ and variation selectors ❤️ ❤︎ ☺️",
    "🧑🏽‍💻 technologist, 🧑‍🚀 astronaut, 🐻‍❄️ polar bear",
    "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘",
]
COMBINING = [
    "e\u0301 vs \u00e9; A\u030a vs \u00c5; n\u0303 vs \u00f1",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0347\u0339\u0316lgo",
    "\u1100\u1161\u11a8 decomposed hangul \uac01",
    "\u0915\u094d\u0937 virama; \u0627\u064e\u0644\u0652 marks; \u05e9\u05c1\u05b8",
    "ﬃ ẛ̣ ḍ̇ q̣̇ Å Ω K combining order \u0061\u0323\u0307 \u0061\u0307\u0323",
]
SPACES = [
    " leading space", "trailing space ", "  two  spaces  ", "\ttab\tseparated\tvalues\t",
    "line1\nline2\n\nline4\n\n\n", "windows\r\nline\r\nendings\r\n", "mixed \t \n \r\n \t  end",
    " " * 17 + "x", "x" + " " * 33, "\n" * 12, "\t" * 9 + "tabs", " \n " * 7,
    "nbsp\u00a0here\u2003em\u3000ideographic\u2009thin", "nel\u0085separator\u2028line\u2029para",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom", "mongolian\u180evowel", " " * 300, "a" + "\n " * 50,
    "\u00a0\u00a0leading nbsp", "end with newline\n", "\r", "\v\f vertical tab and form feed",
]
DIGITS = [
    "1234567890", "3.14159265358979323846", "Call 555-123-4567 or +1 (800) 555-0199.",
    "In 2024, 1,000,000 people; 42% of 7.5e-3.", "0000000000000000000000000001",
    "١٢٣٤٥٦٧٨٩٠ Arabic-Indic digits", "०१२३४५६७८९ Devanagari digits", "１２３４５ fullwidth digits",
    "x² + y³ = z¹⁰; H₂O; ½ ⅓ ¼", "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ roman numerals", "12abc34def5678ghi90", "v1.2.3-rc.4+build.567",
    "9" * 100, "0.1 + 0.2 = 0.30000000000000004",
]
CODE = [
    "def foo(x):\n    return x ** 2  # square\n\nprint(foo(3))\n",
    "int main(int argc, char** argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "<html><body><div class=\"x\">Hello &amp; welcome</div></body></html>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "const f = async (a, b) => { await g(a?.b ?? c); };",
    "    indented with four spaces\n        and eight\n\t\tand tabs",
    "x=>x*2;y+=1;z-=3;w/=4;a%=5;b**=6;c//=7;d<<=8;e>>=9;f&=1;g|=2;h^=3",
    "#include <vector>\nstd::vector<int> v{1,2,3};\nfor (auto& x : v) x *= 2;",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "/* block comment */ // line comment\n-- sql comment\n# shell comment",
    "diff --git a/x b/x\n@@ -1,3 +1,4 @@\n-old line\n+new line\n",
]
URLS = [
    "https://www.example.com/path/to/page?query=value&other=123#fragment",
    "http://localhost:8080/api/v1/chat/completions",
    "ftp://user:pass@ftp.example.org:21/files/archive.tar.gz",
    "mailto:someone@example.com?subject=Hello%20World",
    "Visit https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct for details.",
    "file:///home/user/docs/r%C3%A9sum%C3%A9.pdf",
    "git@github.com:owner/repo.git", "user.name+tag@sub.domain.co.uk",
]
SPECIAL_LIKE = [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHi<|eot_id|>",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<s>[INST] hello [/INST]</s>",
    "<think>\nreasoning here\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|start|>assistant<|channel|>analysis<|message|>thinking<|end|>", "<|return|><|call|><|constrain|>",
    "< |im_start| >", "<|im_start", "im_start|>", "<|im_start|<|im_end|>>", "<<|endoftext|>>",
    "text<|endoftext|>text", " <|im_end|> ", "<unused0><unused99><unused6241>", "<pad><eos><unk><mask>",
    "<0x41><0xZZ><0x-1>", "[multimodal]<start_of_image><image_soft_token>", "<|reserved_special_token_5|>",
    "<repo_name>x<file_sep>y<filename>z", "<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>",
    "<|IM_START|> case differs", "<|im_start|><|im_start|><|im_start|>", "\u2581\u2581x\u2581y",
    "Ġhello ĊĠworld Ċ", "<|box_start|>(1,2),(3,4)<|box_end|>",
]
INVALID_UTF8 = [
    b"\xff", b"abc\x80def", b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 past max", b"ok \xf0\x9f\x8d\x95 \xf0\x9f\x8d", b"\xfe\xfe\xff\xff",
    b"\x80\x81\x82\x83 continuation run", b"trail \xe4\xb8", b"\xe4\xb8\xad\xe6\x96", b"mix \xe9 latin1 \xe8",
]

POOLS = {
    "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéèêëàâäôöûüçñßøåæœÉÀÇ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГД",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέήίόύώ",
    "cjk": "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小同",
    "kana": "あいうえおかきくけこさしすせそアイウエオカキクケコンッー",
    "hangul": "가나다라마바사아자차카타파하한국어글",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह्ािीुूेैोौंः",
    "digits": "0123456789",
    "punct": ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "space": " \t\n\r  ",
    "emoji": "😀😂🥲🤖👍🏽❤️🔥✨🎉🍕🚀🌍👨‍👩‍👧",
    "marks": "\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u064b\u0651\u093c\u094d",
    "symbols": "©®™€£¥¢§¶†‡•°±×÷≈≠≤≥∞∑∏√∫∂∆∇∈∉∩∪⊂⊃←→↑↓⇒⇔♠♣♥♦",
}
WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "with",
         "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "token", "tokenizer", "Hello",
         "world", "naïve", "über", "data", "model", "GPU", "NVIDIA", "CUDA", "don't", "it's", "we'll",
         "3.14", "2026", "foo_bar", "x86_64", "C++", "e-mail", "re-enter", "CO₂", "über-cool", "北京", "東京",
         "서울", "القاهرة", "मुंबई", "🙂", "<|im_end|>", "<eos>", "<s>"]


def _random_mix(rng: random.Random) -> str:
    keys = list(POOLS)
    parts = []
    for _ in range(rng.randint(1, 12)):
        pool = POOLS[rng.choice(keys)]
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 15))))
        if rng.random() < 0.5:
            parts.append(rng.choice([" ", "", "\n", "  ", "\t"]))
    return "".join(parts)


def _random_words(rng: random.Random) -> str:
    n = rng.randint(1, 40)
    seps = [" ", " ", " ", ", ", ". ", "\n", "  ", "\t", "-", "/", ""]
    return "".join(rng.choice(WORDS) + rng.choice(seps) for _ in range(n))


def _random_bytes(rng: random.Random) -> bytes:
    base = _random_words(rng).encode()
    out = bytearray()
    for b in base:
        out.append(b)
        if rng.random() < 0.08:
            out += bytes(rng.randint(0x80, 0xFF) for _ in range(rng.randint(1, 3)))
    return bytes(out)


def corpus() -> list:
    """Returns the list of corpus entries as bytes."""
    rng = random.Random(SEED)
    fixed = LATIN + CJK + RTL_INDIC + EMOJI + COMBINING + SPACES + DIGITS + CODE + URLS + SPECIAL_LIKE
    out = [s.encode("utf-8") for s in fixed] + list(INVALID_UTF8)
    out.append(b"")
    # Long inputs: whitespace runs, digit runs, one long word, a long paragraph.
    out += [(" " * 5000).encode(), ("\n" * 2000).encode(), ("1234567890" * 300).encode(), ("a" * 3000).encode(),
            (" ".join(LATIN) * 8).encode(), ("\t \n" * 700).encode(), ("🙂" * 500).encode()]
    for _ in range(900):
        out.append(_random_mix(rng).encode("utf-8"))
    for _ in range(900):
        out.append(_random_words(rng).encode("utf-8"))
    for _ in range(120):
        out.append(_random_bytes(rng))
    # Fixed strings glued together in random pairs, so pieces meet at new boundaries.
    for _ in range(200):
        a, b = rng.choice(fixed), rng.choice(fixed)
        out.append((a + rng.choice(["", " ", "\n"]) + b).encode("utf-8"))
    return out


if __name__ == "__main__":
    c = corpus()
    bad = sum(1 for b in c if b != b.decode("utf-8", "replace").encode())
    print(f"{len(c)} strings, {sum(map(len, c))} bytes, {bad} with ill-formed UTF-8")
