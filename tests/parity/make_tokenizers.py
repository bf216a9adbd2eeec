"""Reference tokenizers for tests/unit/test_tokenizer.cpp (no hub access: everything is trained here).

Usage: python make_tokenizers.py OUT

Trains small byte-level BPE tokenizers with the `tokenizers` library on a built-in multilingual
corpus, in the shapes real checkpoints ship (GPT-2, Llama-3, Qwen2), saves each through
transformers (tokenizer.json + tokenizer_config.json) and records what transformers' AutoTokenizer
makes of a list of texts: OUT/<style>/cases.json. The C++ tokenizer must reproduce those ids and
decoded strings exactly.
"""
import json
import os
import sys
import time
import unicodedata

# One trainer thread: the merges must not depend on the machine.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 9:45 and they're late; we'll see what you've got.",
    "Reinforcement learning from human feedback trains a policy against a reward model.",
    "def train(model, data):\n\tfor batch in data:\n\t\tloss = model(batch)\n\t\tloss.backward()\n    return loss\n",
    'if (x >= 10 && y != 0) { printf("%d\\n", x / y); }   // comment with    spaces',
    "Numbers: 0 1 2 3 42 123 2024 3.14159 1,000,000 -17 +8 1e-5 0x1F 65536 299792458",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Größe, Mädchen, Straße, schön, fünf Äpfel.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "我们在集群上训练大型语言模型。强化学习需要奖励模型和参考模型。今天天气很好。",
    "日本語のテキストも少し入れます。ひらがな、カタカナ、漢字が混ざっています。東京は晴れです。",
    "مرحبا بالعالم. هذا نص عربي قصير لاختبار المقسم. اللغة العربية جميلة.",
    "Emoji: 😀 😂 🚀 🎉 👍🏽 ❤️ 👩‍👩‍👧‍👦 🇩🇪 🇯🇵 ✨ 🤖",
    "Русский текст: привет, мир! Ελληνικά: γειά σου κόσμε. 한국어 문장도 있습니다.",
    "    indented line with trailing spaces    \n\n\nand blank lines\r\nwindows line end",
    "I'm sure you'RE right, HE'LL come, we'd go, it'S fine, they've been, I'd've",
]

CASES = [
    "",
    " ",
    "     ",
    "\n\n\t",
    "\t\t  \n ",
    "Hello world",
    " Hello world",
    "Hello  world   !",
    "The quick brown fox jumps over the lazy dog.",
    "It's 9:45 and they're late; we'll see what you've got.",
    "I'M SURE YOU'RE RIGHT, HE'LL COME, it'S fine",
    "def f(x):\n\treturn x * 2  # doubled\n\n",
    "if (a<b) {\n    return;\n}\r\n",
    "Über den Wolken; Größe, Mädchen, Straße.",
    "我们在集群上训练大型语言模型。",
    "日本語のテキストも少し入れます。",
    "مرحبا بالعالم",
    "Привет, мир! γειά σου κόσμε. 한국어",
    "Hello世界مرحبا123abcДа",
    "12345678901234567890",
    "3.14159 1,000,000 -17 1e-5 0x1F 2024-06-01",
    "Emoji: 😀 🚀 👍🏽 ❤️",
    "👩‍👩‍👧‍👦 family, 🇩🇪🇯🇵 flags, 🏳️‍🌈",
    "a\u00a0b\u3000c\u2028d\u200be",
    "e\u0301 cafe\u0301 u\u0308ber",          # combining marks (NFC composes them)
    "\u1112\u1161\u11ab\u1100\u1173\u11af",    # conjoining jamo (NFC makes 한글)
    "\uf900 \u2126 \u212b",                    # singletons NFC replaces
    "<|endoftext|>",
    "Hello<|endoftext|>world",
    "a <|endoftext|> b <|endoftext|><|endoftext|>",
    "<|endoftext| not special <|endoftext",
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    "        leading and trailing        ",
    "x" * 3 + "\n" * 5 + " " * 7 + "y",
    "~!@#$%^&*()_+`-=[]\\{}|;':\",./<>?",
    "\U0001F600\U0001F600\U0001F600 \U00010348 \U0001D11E",
    "a\u0085b \u0085\u0085 c\u0085",                 # NEL: whitespace to Oniguruma's \\s
    "a, b; c-d - e,,f;;g--h 1-2-3, 4;5",
]

STYLE_CASES = {
    "gpt2": ["<mask>", "one<mask>two", "one <mask> two", "a  <mask>  b", "x<extra>y z <extra>"],
    "gpt2_prefix": ["<mask>", "one <mask> two", "x<extra>y"],
    "llama3": [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\nSure.<|eot_id|><|end_of_text|>",
        "text <|reserved_special_token_0|> more",
    ],
    "misc": ["a<sw>b", "a <sw> b", "<sw>", "x <sw>,y", "x <rs>   y <rs>", "<rs>\n\nz", "-<sw>-"],
    "qwen2": [
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi 你好<|im_end|>\n",
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
        "a<tool_call>b",
        "<|im_start|><|im_end|><|endoftext|>",
    ],
}


def corpus_lines():
    # Repeated so that the trainer sees enough pairs to reach the vocabulary size.
    return CORPUS * 3 + CASES


def train(model, pre_tokenizer, vocab_size, specials, normalizer=None):
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer)
    return tok


def gpt2(add_prefix_space):
    tok = train(models.BPE(), pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True),
                600, ["<|endoftext|>"])
    # RoBERTa-style mask (lstrip) and a normal (non-special) added token.
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.add_tokens([AddedToken("<extra>", special=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token=None, clean_up_tokenization_spaces=False)
    return fast, dict(merges_as_strings=True)


def llama3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok = train(models.BPE(ignore_merges=True), pre, 1200, specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|eot_id|>", clean_up_tokenization_spaces=False)
    # config.json says what a model directory's config would: bos, and eos as a list (Llama-3.1).
    config = {"bos_token_id": bos,
              "eos_token_id": [tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|eot_id|>")]}
    return fast, dict(config=config)


def qwen2():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train(models.BPE(), pre, 1000, specials, normalizer=normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   clean_up_tokenization_spaces=False)
    # No bos in the tokenizer config; config.json names only eos (as Qwen2 checkpoints do).
    return fast, dict(config={"eos_token_id": tok.token_to_id("<|endoftext|>")})


def misc():
    """Split behaviours other than Isolated, invert, and single_word / rstrip added tokens."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split(Regex(r"\d"), behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok = train(models.BPE(), pre, 500, ["<|endoftext|>"])
    tok.add_tokens([AddedToken("<sw>", single_word=True, special=False)])
    tok.add_special_tokens([AddedToken("<rs>", rstrip=True, normalized=False, special=True)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    return fast, {}


def write_style(out, name, fast, opts):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    fast.save_pretrained(d)
    path = os.path.join(d, "tokenizer.json")
    if opts.get("merges_as_strings"):
        # GPT-2 era files spell merges "a b"; HF still reads both forms.
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False, indent=1)
    if "config" in opts:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(opts["config"], f, indent=1)

    # The reference is what a user's transformers makes of the saved directory.
    hf = AutoTokenizer.from_pretrained(d)
    cases = []
    for text in CASES + STYLE_CASES.get(name, []):
        ids_plain = hf.encode(text, add_special_tokens=False)
        ids_special = hf.encode(text, add_special_tokens=True)
        cases.append({
            "text": text,
            "ids": ids_plain,
            "ids_with_special": ids_special,
            "decoded": hf.decode(ids_plain, skip_special_tokens=False),
            "decoded_with_special": hf.decode(ids_special, skip_special_tokens=False),
            "decoded_skip_special": hf.decode(ids_special, skip_special_tokens=True),
            "nfc_changes": unicodedata.normalize("NFC", text) != text,
        })
    meta = {
        "vocab_size": len(hf),
        "bos_token_id": hf.bos_token_id, "eos_token_id": hf.eos_token_id, "pad_token_id": hf.pad_token_id,
        "special_tokens": {t: hf.convert_tokens_to_ids(t) for t in hf.all_special_tokens},
        "cases": cases,
    }
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    print(f"wrote {d}: tokenizer.json ({hf.backend_tokenizer.get_vocab_size()} tokens), "
          f"tokenizer_config.json, {len(cases)} cases")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tokenizers.py OUT")
    out = sys.argv[1]
    t0 = time.time()
    for name, make in [("gpt2", lambda: gpt2(False)), ("gpt2_prefix", lambda: gpt2(True)),
                       ("llama3", llama3), ("qwen2", qwen2), ("misc", misc)]:
        fast, opts = make()
        write_style(out, name, fast, opts)
    print(f"make_tokenizers: done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
