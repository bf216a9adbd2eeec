"""The checkpoints the export and inspect tests read (ctest fixture io_checkpoints).

    python make_checkpoints.py --program IO_MAKE_CHECKPOINTS --mpirun 'mpirun|-np|2' --work DIR
1. Writes DIR/tokenizer/: a small byte-level BPE trained with Hugging Face `tokenizers` and saved
   by transformers (tokenizer.json, tokenizer_config.json, ...), plus a generation_config.json,
   as a Hugging Face model directory would have them: the tokenizer_dir of the GPT-2 run.
2. Runs io_make_checkpoints (tests/io/make_checkpoints.cpp) under mpirun, which trains tiny
   sharded models one step and writes their checkpoints as the trainer does, with reference
   copies of the in-memory weights and outputs.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Sort the digits: 3 1 2 -> 1 2 3",
    "Grüße aus München! Ça va?",
    "def add(a, b):\n    return a + b\n",
] * 20


def make_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    # A model directory's generation defaults travel with its tokenizer in an export.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", required=True)
    ap.add_argument("--mpirun", required=True, help="launcher words joined by '|'")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    tokdir = os.path.join(args.work, "tokenizer")
    make_tokenizer(tokdir)
    cmd = [w for w in args.mpirun.split("|") if w] + [args.program, args.work, tokdir]
    print("make_checkpoints: " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
