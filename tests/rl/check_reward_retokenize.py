"""A reward model with a tokenizer of its own scores the rollouts as transformers scores their text.

    python check_reward_retokenize.py WORK -- MPIRUN_WORDS... QUARTET

Builds with transformers a tiny Llama actor (byte-level BPE, a chat template of its own) and two
reward models (LlamaForSequenceClassification) with a Mistral-shaped SentencePiece tokenizer
(Metaspace, <0xNN> byte fallback, [INST] control tokens): one with a chat template that trims the
reply (Jinja's trim), one without a template. Then `quartet train` (GRPO, one iteration after
another, rollouts recorded) runs with each:
  chat       prompts prepared with --reward-model (chat rows and raw prompt rows): colocated on one
             rank, and disjoint (the reward model on a rank of its own, the rows crossing over MPI,
             evaluation on held-out prompts through the same path);
  plain      plain JSONL prompts with the template-less reward model (prompt with BOS, completion,
             EOS).
For every recorded rollout the score must equal the reward model's score, computed by
transformers in float32, of the completion's text as the reward model reads it: its chat template
applied to the row's messages plus the reply (apply_chat_template), tokenized by `tokenizers`
without special tokens; or, plain, the prompt with the tokenizer's special tokens, the completion
without, then EOS. The log must say which reading was chosen. Refused, naming the key: a templated
reward model with plain prompts, or with prompts prepared without --reward-model, or for another
reward model; a template-less one with prompts rendered through the actor's template.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
import make_tokenizers  # noqa: E402  (the Mistral-shaped tokenizer of the tokenizer parity tests)

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification,  # noqa: E402
                          PreTrainedTokenizerFast)

ACTOR_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<assistant>{% endif %}")
REWARD_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] | trim }}"
                   " [/INST]{% elif m['role'] == 'assistant' %} {{ m['content'] | trim }}{{ eos_token }}"
                   "{% elif m['role'] == 'system' %}{{ m['content'] }}\n{% endif %}{% endfor %}")
OTHER_TEMPLATE = REWARD_TEMPLATE.replace("[/INST]", "[/INST]:")
CORPUS = ["sort 3817= 1378", "add 12+30= 42", "The quick brown fox jumps over the lazy dog.",
          "0123456789 =+-*/ abcdefghijklmnopqrstuvwxyz <user> <assistant>"] * 20
ROWS = [{"messages": [{"role": "user", "content": "sort 3817"}], "answer": "1378"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "add 12+30"}]},
        {"messages": [{"role": "user", "content": "  héllo wörld  "}]},
        {"prompt": "sort 90210 please"},
        {"prompt": "Grüße, 東京! 🙂"},
        {"messages": [{"role": "user", "content": "two\n\nlines"}]}]
CRASH = re.compile(r"Traceback|Exception raised from|frame #\d|Segmentation fault|terminate called")


def fail(msg):
    sys.exit(f"check_reward_retokenize: {msg}")


def actor_tokenizer(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = ACTOR_TEMPLATE
    fast.save_pretrained(out)
    return fast


def make_models(work):
    torch.manual_seed(5)
    actor = os.path.join(work, "actor")
    fast = actor_tokenizer(actor)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    LlamaForCausalLM(LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                 bos_token_id=None, eos_token_id=eos, pad_token_id=eos,
                                 tie_word_embeddings=False)).save_pretrained(actor)
    rewards = {}
    for name, template in (("reward-chat", REWARD_TEMPLATE), ("reward-other", OTHER_TEMPLATE), ("reward-plain", None)):
        d = os.path.join(work, name)
        rtok, _ = make_tokenizers.mistral()
        rtok.chat_template = template
        rtok.save_pretrained(d)
        # The pad id is <unk> (0), which no rollout holds: transformers then scores each row at its
        # last token, as quartet does (its default, pad = EOS, would skip a final EOS).
        cfg = LlamaConfig(vocab_size=len(rtok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          bos_token_id=rtok.bos_token_id, eos_token_id=rtok.eos_token_id, pad_token_id=0,
                          num_labels=1, tie_word_embeddings=False)
        torch.manual_seed(7)  # the same weights for every reward model: only the tokenizer differs
        LlamaForSequenceClassification(cfg).save_pretrained(d)
        rewards[name] = d
    return actor, rewards


def prepare(work, actor, reward, name, rows):
    data = os.path.join(work, name + "-data.jsonl")
    with open(data, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    out = os.path.join(work, name + ".jsonl")
    cmd = [sys.executable, "inputs/prepare/prepare_prompts.py", "--model", actor, "--out", out, data]
    if reward:
        cmd += ["--reward-model", reward]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return out


TRAIN = {"run.iterations": "2", "algorithm.name": "grpo", "algorithm.samples_per_prompt": "2", "rollout.batch": "3",
         "algorithm.minibatch": "6", "placement.critic": "0", "placement.reference": "0", "algorithm.kl_coef": "0",
         "checkpoint.at_end": "false", "model.reward.kind": "model", "algorithm.reward_clip": "0",
         "rollout.max_new_tokens": "12", "rollout.max_prompt_tokens": "64", "rollout.temperature": "1.5",
         "output.rollouts_every": "1", "model.actor.lr": "1e-3"}


def train(launcher, quartet, np_, settings):
    cmd = launcher + [str(np_), quartet, "train", "inputs/demo.deck"]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def rollouts(run_dir):
    out = []
    with h5py.File(os.path.join(run_dir, "run.h5"), "r") as f:
        for name in sorted(f["rollouts"]):
            g = f["rollouts"][name]
            for p, c, s in zip(g["prompt"][()], g["completion"][()], g["scores"][()]):
                out.append((p.decode() if isinstance(p, bytes) else p, c.decode() if isinstance(c, bytes) else c,
                            float(s)))
    return out


class Reference:
    """The reward model's score of a rollout, by transformers and `tokenizers`, in float32."""

    def __init__(self, reward_dir):
        self.tok = PreTrainedTokenizerFast.from_pretrained(reward_dir)
        self.file = Tokenizer.from_file(os.path.join(reward_dir, "tokenizer.json"))
        self.model = LlamaForSequenceClassification.from_pretrained(reward_dir, torch_dtype=torch.float32).eval()

    def chat_ids(self, messages, completion):
        text = self.tok.apply_chat_template(messages + [{"role": "assistant", "content": completion}], tokenize=False)
        return self.file.encode(text, add_special_tokens=False).ids

    def plain_ids(self, prompt, completion):
        return (self.file.encode(prompt, add_special_tokens=True).ids +
                self.file.encode(completion, add_special_tokens=False).ids + [self.tok.eos_token_id])

    def score(self, ids):
        with torch.no_grad():
            return float(self.model(torch.tensor([ids])).logits[0, 0])


def check_scores(case, run_dir, reference, ids_of):
    rows = rollouts(run_dir)
    if not rows:
        fail(f"{case}: no rollouts recorded in {run_dir}/run.h5")
    worst = 0.0
    for prompt, completion, score in rows:
        want = reference.score(ids_of(prompt, completion))
        worst = max(worst, abs(want - score))
        if abs(want - score) > 1e-4 * max(1.0, abs(want)):
            fail(f"{case}: prompt {prompt!r}, completion {completion!r}: quartet scored {score:.6f}, "
                 f"transformers {want:.6f}")
    stripped = sum(c != c.strip() for _, c, _ in rows)
    print(f"  {case:28} {len(rows)} rollouts ({stripped} with whitespace the template trims) match transformers "
          f"(largest difference {worst:.2e})")


def main():
    sep = sys.argv.index("--")
    work = os.path.abspath(sys.argv[1])
    launcher, quartet = sys.argv[sep + 1:-1], sys.argv[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    actor, rewards = make_models(work)
    chat_file = prepare(work, actor, rewards["reward-chat"], "prompts-chat", ROWS)
    unrendered = prepare(work, actor, None, "prompts-actor-only", ROWS)
    plain_file = os.path.join(work, "prompts-plain.jsonl")
    with open(plain_file, "w") as f:
        for p in ["sort 3817=", "add 12+30=", "Grüße 🙂 ", "  two  spaces"]:
            f.write(json.dumps({"prompt": p}, ensure_ascii=False) + "\n")
    messages_of = {}
    with open(chat_file) as f:
        next(f)
        for line in f:
            row = json.loads(line)
            messages_of[row["prompt"]] = row.get("messages")
    base = dict(TRAIN, **{"model.actor.path": actor, "model.actor.dtype": "float32", "model.reward.dtype": "float32"})

    def runs(case, np_, settings, note):
        out = os.path.join(work, "runs", case)
        rc, text = train(launcher, quartet, np_, dict(base, **settings, **{"run.out": out}))
        if rc != 0 or CRASH.search(text) or not re.search(note, text):
            fail(f"{case}: train should run, printing {note!r}; exit {rc}:\n{text[-4000:]}")
        return out

    def refuses(case, settings, pattern):
        rc, text = train(launcher, quartet, 1, dict(base, **settings, **{"run.out": os.path.join(work, "runs", case)}))
        if rc == 0 or CRASH.search(text) or not re.search(pattern, text):
            fail(f"{case}: expected a refusal matching {pattern!r}; exit {rc}:\n{text[-3000:]}")
        line = next(ln for ln in text.splitlines() if re.search(pattern, ln))
        print(f"  {case:28} refused: ...{line.strip()[-130:]}")

    chat = Reference(rewards["reward-chat"])
    chat_note = (r"train: reward model: its tokenizer is not the actor's \(.*\): each completion is decoded to text and "
                 r"tokenized with .*reward-chat/tokenizer\.json, inside the conversation its chat template .* renders "
                 r"\(the reply's whitespace transformed as the template does: strip\)")
    colocated = {"placement.mode": "colocated", "placement.actor": "1", "placement.reward": "1"}
    out = runs("chat-colocated", 1, dict(colocated, **{"rollout.prompts": chat_file,
                                                       "model.reward.path": rewards["reward-chat"]}), chat_note)
    check_scores("chat, colocated", out, chat, lambda p, c: chat.chat_ids(messages_of[p], c))
    disjoint = {"placement.mode": "disjoint", "placement.actor": "1", "placement.reward": "1",
                "eval.prompts": chat_file, "eval.every": "1", "eval.count": "4"}
    out = runs("chat-disjoint", 2, dict(disjoint, **{"rollout.prompts": chat_file,
                                                     "model.reward.path": rewards["reward-chat"]}), chat_note)
    check_scores("chat, disjoint (and eval)", out, chat, lambda p, c: chat.chat_ids(messages_of[p], c))
    plain = Reference(rewards["reward-plain"])
    out = runs("plain", 1, dict(colocated, **{"rollout.prompts": plain_file, "model.reward.path": rewards["reward-plain"]}),
               r"train: reward model: its tokenizer is not the actor's .*after the prompt's text and followed by EOS")
    check_scores("plain, colocated", out, plain, plain.plain_ids)

    refuses("templated, plain prompts", dict(colocated, **{"rollout.prompts": plain_file,
                                                             "model.reward.path": rewards["reward-chat"]}),
            r"rollout\.prompts is '.*prompts-plain\.jsonl', whose rows do not carry the reward model's chat rendering.*"
            r"--reward-model")
    refuses("prepared without it", dict(colocated, **{"rollout.prompts": unrendered,
                                                       "model.reward.path": rewards["reward-chat"]}),
            r"rollout\.prompts is '.*prompts-actor-only\.jsonl', whose rows do not carry the reward model's chat")
    refuses("prepared for another", dict(colocated, **{"rollout.prompts": chat_file,
                                                        "model.reward.path": rewards["reward-other"]}),
            r"rollout\.prompts is '.*prompts-chat\.jsonl', whose rows were rendered for the reward model of .*"
            r"another tokenizer or chat template")
    refuses("actor-templated, no template", dict(colocated, **{"rollout.prompts": unrendered,
                                                                "model.reward.path": rewards["reward-plain"]}),
            r"rollout\.prompts is '.*prompts-actor-only\.jsonl', rendered with the actor's chat template")
    print("check_reward_retokenize: every score equals transformers' on the reward model's own tokens")


if __name__ == "__main__":
    main()
