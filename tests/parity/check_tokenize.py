"""`quartet tokenize MODEL_DIR` (and --decode) against Hugging Face's tokenizer of that dir.

    python check_tokenize.py QUARTET MODEL_DIR
Exit 0 only if every line's ids equal HF's and decoding them gives the line back.
"""
import subprocess
import sys

from transformers import AutoTokenizer

LINES = ["The quick brown fox", "Grüße aus München", "数字を並べ替えて", "  two  spaces\tand tab",
         "emoji 👍🏽 and <|endoftext|> inline", ""]


def run(quartet, model_dir, args, text):
    out = subprocess.run([quartet, "tokenize", model_dir, *args], input=text.encode(),
                         capture_output=True, check=True)
    return out.stdout.decode().split("\n")[:-1]


def main(quartet, model_dir):
    hf = AutoTokenizer.from_pretrained(model_dir)
    got = run(quartet, model_dir, [], "\n".join(LINES) + "\n")
    bad = 0
    for line, ids in zip(LINES, got):
        expected = hf(line).input_ids
        ours = [int(x) for x in ids.split()]
        bad += ours != expected
        print(f"{'ok  ' if ours == expected else 'DIFF'} {line!r}: hf={expected} quartet={ours}")
    back = run(quartet, model_dir, ["--decode"], "\n".join(got) + "\n")
    for line, text in zip(LINES, back):
        expected = hf.decode(hf(line).input_ids)
        bad += text != expected
        print(f"{'ok  ' if text == expected else 'DIFF'} decode {text!r} (hf {expected!r})")
    bad += len(got) != len(LINES) or len(back) != len(LINES)
    print(f"check_tokenize: {'all identical' if not bad else f'{bad} differences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
