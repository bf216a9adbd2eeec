"""Reference tokenizers for tests/unit/test_tokenizer.cpp (no hub access: everything is trained here).

Usage: python make_tokenizers.py OUT

Trains small BPE tokenizers with the `tokenizers` library on a built-in multilingual corpus, in
the shapes real checkpoints ship: byte-level (GPT-2, Llama-3, Qwen2) and SentencePiece-style
(Llama-2 in both its tokenizer.json forms, Mistral, Gemma: Metaspace or a normalizer for the
spaces, <0xNN> byte fallback), plus NFKC and corner cases of the same pieces. Each is saved through
transformers (tokenizer.json + tokenizer_config.json) and what transformers' AutoTokenizer makes of
a list of texts is recorded in OUT/<style>/cases.json, after checking that `tokenizers` itself,
reading the same tokenizer.json, agrees. The C++ tokenizer must reproduce those ids and decoded
strings exactly.
"""
import json
import os
import random
import sys
import time

# One trainer thread: the merges must not depend on the machine.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# sp_misc makes tokenizers panic on purpose (its Strip decoder on an empty text): no backtraces.
os.environ["RUST_BACKTRACE"] = "0"
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
    "नमस्ते दुनिया। यह हिंदी में एक छोटा सा वाक्य है। भाषा मॉडल।",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ and ﬁne ligatures, x² ①, ‘quoted’ “text” ``tex''",
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
    "नमस्ते दुनिया। हिंदी",
    "mixed: abc नमस्ते 123 日本語 Да مرحبا 😀 ok",
    "a    b\t\tc\n\n\nd  \t \n e",
    "\u2581 already ▁▁ metaspaced▁text ▁",
    "unseen: 鬱 龘 🦩 🫠 ꙮ ᚠᛇᚻ ⵣ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "compat: ＡＢＣ１２３ ﬁne x² ① ℌ ㎏ Ⅻ ｶﾀｶﾅ ‘q’",
    "\x01ctrl\x02 é\x03ü\x7f",
    "  \n  lines\n   start\n\twith space",
    "👨‍💻👩🏽‍🚀 🧑‍🤝‍🧑 and 🏴‍☠️",
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
    "llama2": [
        "<s>[INST] Hi [/INST] Hello</s>", "a <lstrip> b", "a<rstrip>   b c", "x <sw> y", "x<sw>y",
        "<norm> a <norm>b<norm>", "<raw> x<raw>", "   <s>   spaced   </s>   ", "<unk>unk", "</s>",
    ],
    "mistral": [
        "<s>[INST] What is 2+2? [/INST] 4</s>", "[INST][/INST]", "a [INST] b", " [INST]x",
        "a <lstrip> b", "a<rstrip>   b", "x <sw> y", "é<sw>", "<norm>x",
    ],
    "gemma": [
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "a hello world b", "hello world", "ahello worldb", "<start_of_turn> <end_of_turn>",
        "x <sw> y", "a <lstrip> b", "a<rstrip>  b",
    ],
    "nfkc": ["ﬁ<norm>", "<norm>", "ＡＢＣ", "‘<raw>’", "a <lstrip>  <rstrip>  b", "x<sw>y x <sw> y"],
    "sp_misc": ["  <raw> x", "<raw>  x", "12ab 34 cd", " 1", "\n\n  x", "<sw>ab <sw> é <sw>é", "``a``"],
    "sp_never": ["<s> x", "x </s> y", "<norm>a"],
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


# SentencePiece-style BPE (Llama-2, Mistral, Gemma): "▁" for spaces, a vocabulary that starts with
# its special tokens and the 256 byte tokens <0x00>..<0xFF> that byte_fallback turns an unknown
# character into. The merges are trained here with a Metaspace pre-tokenizer on the corpus alone
# (not the test texts), so that the rarer characters of the texts are not in the vocabulary.
def sentencepiece_vocab(vocab_size, specials, byte_tokens=range(256), limit_alphabet=None, extra_merges=()):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    limit = {} if limit_alphabet is None else {"limit_alphabet": limit_alphabet}
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, **limit)
    tok.train_from_iterator(CORPUS * 3, trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(list(specials) + ["<0x%02X>" % b for b in byte_tokens])}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    merges = [tuple(m) for m in trained["merges"]]
    for a, b in extra_merges:  # whitespace runs as Gemma has them, ranked last
        for t in (a, b, a + b):
            vocab.setdefault(t, len(vocab))
        merges.append((a, b))
    return vocab, merges


def sentencepiece(vocab_size, specials, normalizer, pre_tokenizer, decoder, template, byte_fallback=True,
                  fuse_unk=True, **vocab_args):
    vocab, merges = sentencepiece_vocab(vocab_size, specials, **vocab_args)
    unk = "<unk>"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=byte_fallback, unk_token=unk,
                               fuse_unk=fuse_unk))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    # One added token for each flag (normalized is the default of a non-special token).
    tok.add_special_tokens([AddedToken("<lstrip>", lstrip=True, normalized=False, special=True),
                            AddedToken("<rstrip>", rstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("<sw>", single_word=True, special=False),
                    AddedToken("<norm>", normalized=True, special=False),
                    AddedToken("<raw>", normalized=False, special=False)])
    if template is not None:
        single, pair = template
        tok.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(t, vocab[t]) for t in specials if t in single])
    return tok


LLAMA2_DECODER = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1, right=0)])
LLAMA2_TEMPLATE = ("<s> $A", "<s> $A <s> $B")


def llama2():
    """Llama-2 as transformers writes it today: Metaspace (prepend first, no split), no normalizer."""
    tok = sentencepiece(700, ["<unk>", "<s>", "</s>"], None,
                        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                        LLAMA2_DECODER, LLAMA2_TEMPLATE, limit_alphabet=150)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, {}


def llama2_legacy():
    """Llama-2's own tokenizer.json: the spaces by a normalizer (Prepend ▁, Replace ' ' → ▁), no pre-tokenizer."""
    tok = sentencepiece(700, ["<unk>", "<s>", "</s>"],
                        normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
                        LLAMA2_DECODER, LLAMA2_TEMPLATE, limit_alphabet=150)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, {}


def mistral():
    """Mistral v0.3: as Llama-2 today, with control tokens ([INST] ...) as special tokens."""
    tok = sentencepiece(800, ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], None,
                        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                        LLAMA2_DECODER, LLAMA2_TEMPLATE, limit_alphabet=200)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, {}


def gemma():
    """Gemma: spaces replaced by a normalizer, no pre-tokenizer, whitespace runs as tokens, no Strip."""
    tok = sentencepiece(700, ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"],
                        normalizers.Replace(" ", "▁"), None,
                        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
                        ("<bos> $A", "<bos> $A <bos> $B"), limit_alphabet=150,
                        extra_merges=[("▁", "▁"), ("▁▁", "▁▁"), ("\n", "\n"), ("\t", "\t")])
    tok.add_tokens([AddedToken(" hello world", normalized=True, special=False)])  # matched as ▁hello▁world
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>", clean_up_tokenization_spaces=False)
    return fast, {}


def nfkc():
    """NFKC and a Regex Replace; Metaspace (always) written as older files have it; unknown
    characters become one fused <unk> (no byte fallback); the template puts </s> after the text."""
    tok = sentencepiece(600, ["<unk>", "<s>", "</s>"],
                        normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex("[‘’]"), "'")]),
                        pre_tokenizers.Metaspace(), decoders.Metaspace(), ("$A </s>", "$A </s> $B </s>"),
                        byte_fallback=False)

    def old_metaspace(spec):  # before prepend_scheme and split, files said add_prefix_space
        for part in (spec["pre_tokenizer"], spec["decoder"]):
            part.pop("prepend_scheme")
            part.pop("split")
            part["add_prefix_space"] = True
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, dict(patch=old_metaspace)


def sp_misc():
    """The corner cases: a normalizer that removes the text's start (so Metaspace's "first" must
    not prepend), a Split before Metaspace, byte tokens for ASCII only (an unknown é is <unk>,
    and HF puts a later byte token before it), unk not fused, a Regex Replace and Strip from both
    ends in the decoder (which tokenizers fails on for an empty text)."""
    tok = sentencepiece(600, ["<unk>", "<s>", "</s>"],
                        normalizers.Sequence([normalizers.Replace(Regex(r"^\s+"), ""), normalizers.NFC(),
                                              normalizers.Replace("``", '"')]),
                        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\d+"), behavior="isolated"),
                                                 pre_tokenizers.Metaspace(prepend_scheme="first", split=True)]),
                        decoders.Sequence([decoders.Replace(Regex("▁"), " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(content=" ", left=1, right=1)]),
                        ("<s> $A </s>", "<s> $A </s> $B </s>"), fuse_unk=False, byte_tokens=range(128),
                        limit_alphabet=120)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, {}


def sp_never():
    """Metaspace that never prepends, as pre-tokenizer and decoder; no post-processor."""
    tok = sentencepiece(600, ["<unk>", "<s>", "</s>"], None, pre_tokenizers.Metaspace(prepend_scheme="never"),
                        decoders.Sequence([decoders.Metaspace(prepend_scheme="never"), decoders.ByteFallback(),
                                           decoders.Fuse()]), None, limit_alphabet=150)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)
    return fast, {}


STYLE_CASES["llama2_legacy"] = STYLE_CASES["llama2"]


def decode_or_none(decode, ids, skip):
    """The decoded text, or None where tokenizers fails (a Rust panic is a BaseException)."""
    try:
        return decode(ids, skip_special_tokens=skip)
    except BaseException as e:  # noqa: B036 (pyo3's PanicException)
        if type(e).__name__ != "PanicException" and not isinstance(e, Exception):
            raise
        return None


def decode_cases(hf, texts):
    """Id lists no text encodes to: random ids from the whole vocabulary (byte tokens in any order,
    specials anywhere), and texts cut after each of their first tokens."""
    rng = random.Random(1234)
    n = len(hf)
    id_lists = [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(40)]
    byte_ids = [hf.convert_tokens_to_ids(f"<0x{b:02X}>") for b in (0xE6, 0x97, 0xA5, 0x41, 0xFF)]
    if all(isinstance(i, int) and i != hf.unk_token_id for i in byte_ids):
        id_lists += [byte_ids[:2], byte_ids[:3], byte_ids[3:], byte_ids[2:4], byte_ids]
    for text in texts:
        ids = hf.encode(text, add_special_tokens=False)
        id_lists += [ids[:k] for k in range(1, min(len(ids), 6))]
    return [{"ids": ids, "decoded": decode_or_none(hf.decode, ids, False),
             "decoded_skip_special": decode_or_none(hf.decode, ids, True)} for ids in id_lists]


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
    if "patch" in opts:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        opts["patch"](spec)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False, indent=1)
    if "config" in opts:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(opts["config"], f, indent=1)

    # The reference is what a user's transformers makes of the saved directory.
    hf = AutoTokenizer.from_pretrained(d)
    # ... which must be what `tokenizers` itself makes of the tokenizer.json (data preparation
    # tokenizes with it), so that one reference stands for both.
    raw = Tokenizer.from_file(path)
    texts = CASES + STYLE_CASES.get(name, [])
    cases = []
    for text in texts:
        ids_plain = hf.encode(text, add_special_tokens=False)
        ids_special = hf.encode(text, add_special_tokens=True)
        for ids, special in ((ids_plain, False), (ids_special, True)):
            if raw.encode(text, add_special_tokens=special).ids != ids:
                sys.exit(f"{name}: transformers and tokenizers encode {text!r} differently")
        cases.append({
            "text": text,
            "ids": ids_plain,
            "ids_with_special": ids_special,
            "decoded": decode_or_none(hf.decode, ids_plain, False),
            "decoded_with_special": decode_or_none(hf.decode, ids_special, False),
            "decoded_skip_special": decode_or_none(hf.decode, ids_special, True),
        })
    decodes = decode_cases(hf, texts[:40:4])
    for c in cases + decodes:
        for ids in (c["ids"], c.get("ids_with_special", c["ids"])):
            for skip in (False, True):
                if decode_or_none(raw.decode, ids, skip) != decode_or_none(hf.decode, ids, skip):
                    sys.exit(f"{name}: transformers and tokenizers decode {ids} differently")
    meta = {
        "vocab_size": len(hf),
        "bos_token_id": hf.bos_token_id, "eos_token_id": hf.eos_token_id, "pad_token_id": hf.pad_token_id,
        "special_tokens": {t: hf.convert_tokens_to_ids(t) for t in hf.all_special_tokens},
        "cases": cases,
        "decode_cases": decodes,
    }
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    print(f"wrote {d}: tokenizer.json ({hf.backend_tokenizer.get_vocab_size()} tokens), "
          f"tokenizer_config.json, {len(cases)} cases, {len(decodes)} decode cases")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tokenizers.py OUT")
    out = sys.argv[1]
    t0 = time.time()
    print("make_tokenizers: sp_misc's decoder panics in tokenizers on empty texts; those panics are expected")
    for name, make in [("gpt2", lambda: gpt2(False)), ("gpt2_prefix", lambda: gpt2(True)),
                       ("llama3", llama3), ("qwen2", qwen2), ("misc", misc), ("llama2", llama2),
                       ("llama2_legacy", llama2_legacy), ("mistral", mistral), ("gemma", gemma), ("nfkc", nfkc),
                       ("sp_misc", sp_misc), ("sp_never", sp_never)]:
        fast, opts = make()
        write_style(out, name, fast, opts)
    print(f"make_tokenizers: done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
