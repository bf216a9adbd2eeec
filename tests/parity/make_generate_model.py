"""A tiny Llama with a byte-level BPE tokenizer, saved in Hugging Face layout, plus prompts and
Hugging Face's own greedy completions of them: the reference for `quartet generate`.

    python make_generate_model.py OUT_DIR
writes OUT_DIR/model/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json),
OUT_DIR/prompts.jsonl and OUT_DIR/expected.jsonl ({"index", "completion", "tokens"} per prompt),
and OUT_DIR/expected_min.jsonl: the same with the stop tokens STOPS and min_new_tokens=MIN_NEW_TOKENS
(HF masks every EOS id until then; quartet's rollout.min_new_tokens must do the same).
OUT_DIR/model_eos/ is the same model whose config.json lists the first of STOPS beside EOS as
eos_token_id and whose generation_config.json lists every stop (as Llama 3 and Qwen ship their
chat turns' end): OUT_DIR/expected_eos.jsonl holds HF's greedy completions with that model's own
generation config, which quartet must stop at without being told (no rollout.stop).

    python make_generate_model.py OUT_DIR --families
writes the same (without expected_min.jsonl) for each of FAMILIES under OUT_DIR/<family>/: Qwen3
(q/k norms, head_dim 24 of hidden 64 / 4 heads, a window of 4 on layer 1), Mistral (a window
of 4 on every layer) and Llama with Llama 3.1's rope scaling (original_max_position_embeddings
8): prompts and completions run well past the windows and the original context.
Random weights, built locally: no hub access.
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast,
                          Qwen3Config, Qwen3ForCausalLM)

MAX_NEW_TOKENS = 12
MIN_NEW_TOKENS = 6
STOPS = ["9", "1"]  # tokens this model's greedy completions emit early (checked below)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Sort the digits: 3 1 2 -> 1 2 3",
    "Grüße aus München! Ça va? ¿Qué tal?",
    "数字を並べ替えてください。",
    "def add(a, b):\n    return a + b\n",
] * 20
PROMPTS = ["The quick brown", "Sort the digits: 9 4 7 ->", "Grüße", "数字", "def add(", "x"]
FAMILIES = ("qwen3", "mistral", "llama3")


def make_model(family, fast, eos):
    """The family's tiny model with the tokenizer's vocabulary, random weights (seed 7); the norm
    weights drawn around 1, so that a norm the loader skipped would show."""
    common = dict(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  bos_token_id=None, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False)
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**common)).eval()
    if family == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
        model = LlamaForCausalLM(LlamaConfig(**common, rope_parameters=rope))
    elif family == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=4))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=24, use_sliding_window=True, sliding_window=4,
                                             max_window_layers=1))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
    return model.eval()


def main(out, family="llama"):
    torch.manual_seed(7)
    os.makedirs(os.path.join(out, "model"), exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.save_pretrained(os.path.join(out, "model"))
    eos = fast.convert_tokens_to_ids("<|endoftext|>")

    model = make_model(family, fast, eos)
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)

    with open(os.path.join(out, "prompts.jsonl"), "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}, ensure_ascii=False) + "\n")
    def greedy(ids, stops, **kw):
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=MAX_NEW_TOKENS, eos_token_id=stops, pad_token_id=eos, **kw)
        new = gen[0, ids.shape[1]:].tolist()
        ends = [k for k, t in enumerate(new) if t in stops]
        return new[: ends[0] + 1] if ends else new  # HF pads after the stop; quartet does not

    stops = [eos] + [fast.convert_tokens_to_ids(s) for s in STOPS]
    early = 0
    runs = (("expected.jsonl", {}), ("expected_min.jsonl", {"min_new_tokens": MIN_NEW_TOKENS}))
    if family != "llama":
        runs = runs[:1]
    for name, kw in runs:
        with open(os.path.join(out, name), "w") as f, torch.no_grad():
            for i, p in enumerate(PROMPTS):
                ids = fast(p, return_tensors="pt").input_ids
                new = greedy(ids, stops, **kw) if kw else greedy(ids, [eos])
                if kw and len(greedy(ids, stops)) < MIN_NEW_TOKENS:
                    early += 1
                f.write(json.dumps({"index": i, "tokens": new,
                                    "completion": fast.decode(new, skip_special_tokens=True)},
                                   ensure_ascii=False) + "\n")
    if family != "llama":
        print(f"make_generate_model: {out}: {type(model).__name__}, vocab {len(fast)}, {len(PROMPTS)} prompts, "
              f"greedy references of {MAX_NEW_TOKENS} tokens")
        return
    # Without min_new_tokens some completions must stop before it, or the check proves nothing.
    assert early > 0, "no greedy completion stops on STOPS before MIN_NEW_TOKENS: pick other stop tokens"
    write_eos_model(out, fast, eos, stops)
    print(f"make_generate_model: {out}: vocab {len(fast)}, {len(PROMPTS)} prompts, "
          f"greedy references of {MAX_NEW_TOKENS} tokens; with stops {STOPS} and min_new_tokens "
          f"{MIN_NEW_TOKENS}, {early} would stop earlier without it")


def write_eos_model(out, fast, eos, stops):
    """model_eos/: the model with list-valued eos_token_ids, and HF's greedy completions under its
    own generation config. Some completion must end at a stop other than EOS, or the check proves
    nothing."""
    src, dst = os.path.join(out, "model"), os.path.join(out, "model_eos")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "wb") as g:
            g.write(f.read())
    with open(os.path.join(dst, "config.json")) as f:
        config = json.load(f)
    config["eos_token_id"] = stops[:2]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(dst, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": stops, "pad_token_id": eos}, f, indent=2)
    model = LlamaForCausalLM.from_pretrained(dst, dtype=torch.float32).eval()
    assert list(model.generation_config.eos_token_id) == stops, model.generation_config.eos_token_id
    other = 0
    with open(os.path.join(out, "expected_eos.jsonl"), "w") as f, torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = fast(p, return_tensors="pt").input_ids
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
            new = gen[0, ids.shape[1]:].tolist()
            ends = [k for k, t in enumerate(new) if t in stops]
            new = new[: ends[0] + 1] if ends else new
            other += bool(new) and new[-1] in stops[1:]
            f.write(json.dumps({"index": i, "tokens": new, "completion": fast.decode(new, skip_special_tokens=True)},
                               ensure_ascii=False) + "\n")
    assert other > 0, "no greedy completion ends at a stop other than EOS: pick other stop tokens"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[2] == "--families":
        for f in FAMILIES:
            main(os.path.join(sys.argv[1], f), f)
    else:
        main(sys.argv[1])
