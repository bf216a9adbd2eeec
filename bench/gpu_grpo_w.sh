#!/usr/bin/env bash
# Workload W of the GRPO-at-scale work, through `quartet train` on one GPU: an 886M-Llama-shaped
# actor and reference (inputs/models/llama-886m), GRPO without a critic, a rule reward, bf16;
# 128 prompts x 8 samples an iteration; prompts of 64-512 tokens; answers of up to 1,024 tokens.
# The model is a Hugging Face directory that transformers writes here with random weights, with a
# tokenizer of one character a token over its whole 32,000-id vocabulary (CJK ideographs and
# Hangul syllables, no merges), so that a random
# model's near-uniform next token stops a row with probability STOPS/32000 a step: STOPS (80) stop
# ids give lengths spread over the range (mean about 400, about 8% cut at 1,024). The prompts
# file is prepared (prompt_ids given), random ids. The reward is `format`: 1 for an answer that
# holds one of 100 given characters (a share of the answers that grows with their length), so
# GRPO's groups have advantages. CONFIG (the 886M config) changes the model's shape. ITERATIONS (3) iterations.
# Generation batches continuously over a paged KV cache: DECODE_ROWS (256) rows decode at once
# over the iteration's 1,024 sequences (one chunk, rollout.micro_batch 128), a finished row taking
# the next waiting sequence, in blocks of KV_BLOCK (16) slots (the pool: 256 x 1,536 slots);
# DECODE_ROWS=0 decodes chunks of MICRO_BATCH (32) prompts, 256 rows x 1,536 slots, contiguously.
# Scoring and training run packed (rollout.score_tokens 24,576, train.micro_batch_tokens 12,288:
# the tokens of the padded passes of 16 and 8 full-width rows); PACKED=0 runs them padded.
# Prints the phase table (postprocess/phase_table.py), the answer lengths and the iteration
# table against the GPU's limits (postprocess/iteration_table.py); logs and run.h5 in $OUT.
#   bash bench/gpu_grpo_w.sh
set -uo pipefail
# shellcheck source=bench/gpu_quartet_run.sh
source bench/gpu_quartet_run.sh  # $OUT, t(), quartet built
model=runs/w-model
python3 - "$model" "${STOPS:-80}" "${CONFIG:-inputs/models/llama-886m/config.json}" > runs/w-stops.txt <<'PY'
import hashlib, json, os, random, sys
import torch
from tokenizers import AddedToken, Tokenizer, models
from transformers import AutoConfig, AutoModelForCausalLM
out, stops, config_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = AutoConfig.from_pretrained(config_path)
V = config.vocab_size
# One token a character, no merges: CJK ideographs, then Hangul syllables, as many as the ids.
chars = [chr(c) for c in list(range(0x4E00, 0xA000)) + list(range(0xAC00, 0xD7A4))][:V - 3]
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
if not any(n.startswith("model") and n.endswith(".safetensors") for n in (os.listdir(out) if os.path.isdir(out) else [])):
    torch.manual_seed(0)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 1, 2, 0
    AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16).save_pretrained(out)
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
               "tokenizer_class": "PreTrainedTokenizerFast"}, f)
sha = hashlib.sha256(open(os.path.join(out, "tokenizer.json"), "rb").read()).hexdigest()
r = random.Random(7)
with open("runs/w-prompts.jsonl", "w") as f:
    f.write(json.dumps({"quartet_prompts": 1, "tokenizer": {"sha256": sha, "source": out + "/tokenizer.json"},
                        "chat_template": {"applied": False}}) + "\n")
    for _ in range(1024):
        ids = [1] + [r.randrange(3, V) for _ in range(r.randint(63, 511))]
        f.write(json.dumps({"prompt": "".join(chars[i - 3] for i in ids[1:]), "prompt_ids": ids},
                           ensure_ascii=False) + "\n")
picked = r.sample(range(3, V), stops + 100)
print(",".join(chars[i - 3] for i in picked[:stops]))  # the stop tokens
with open("runs/w-reward.txt", "w") as f:
    f.write("".join(chars[i - 3] for i in picked[stops:]))  # the reward's characters
PY
t "model, tokenizer and prompts"
ITER=${ITERATIONS:-3}
args=(--set "run.iterations=$ITER" --set checkpoint.at_end=false --set dist.backend=auto --set dist.device=auto
      --set placement.mode=colocated --set placement.actor=1 --set placement.reference=1 --set placement.critic=0
      --set placement.reward=0 --set "model.actor.path=$model" --set "model.reference.path=$model"
      --set model.actor.dtype=bfloat16 --set model.reference.dtype=bfloat16 --set model.actor.lr=1e-7
      --set algorithm.name=grpo --set algorithm.samples_per_prompt=8 --set algorithm.minibatch=256
      --set algorithm.epochs=1 --set train.micro_batch=8 --set rollout.prompts=runs/w-prompts.jsonl
      --set rollout.batch=128 --set rollout.score_micro_batch=16
      --set rollout.max_prompt_tokens=512 --set rollout.max_new_tokens=1024 --set "rollout.top_p=${TOP_P:-1}"
      --set "rollout.stop=$(cat runs/w-stops.txt)" --set reward.terms=format --set "reward.format_regex=(?s).*[$(cat runs/w-reward.txt)].*"
      --set output.rollouts_every=1)
if [ "${DECODE_ROWS:-256}" != 0 ]; then
  args+=(--set "rollout.micro_batch=${MICRO_BATCH:-128}" --set "rollout.decode_rows=${DECODE_ROWS:-256}"
         --set "rollout.kv_block=${KV_BLOCK:-16}")
else
  args+=(--set "rollout.micro_batch=${MICRO_BATCH:-32}")
fi
[ "${PACKED:-1}" = 1 ] && args+=(--set rollout.score_tokens=24576 --set train.micro_batch_tokens=12288)
for kv in ${SET:-}; do args+=(--set "$kv"); done
name=w${TAG:+-$TAG}
timeout 560 mpirun --oversubscribe --bind-to none -np 1 build-gpu/quartet train /dev/null "${args[@]}" \
  --set "run.out=runs/$name" > "$OUT/$name.log" 2>&1
echo "exit $?"
grep -E "^iter|^train:|^  [0-9]|rror" "$OUT/$name.log" | tail -12
t "$name"
phase_summary "runs/$name:1"
python3 - "runs/$name/run.h5" <<'PY' || true
import sys
import h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    for name in sorted(f["rollouts"]):
        g = f["rollouts"][name]
        new = g["action_mask"][()].sum(1)
        prompt = g["attention_mask"][()].sum(1) - new
        print(f"iteration {int(name)}: {len(new)} answers, lengths mean {new.mean():.0f}, p10/p50/p90 "
              f"{np.percentile(new, 10):.0f}/{np.percentile(new, 50):.0f}/{np.percentile(new, 90):.0f}, "
              f"{(new >= 1024).mean():.1%} at 1,024; prompts mean {prompt.mean():.0f}; "
              f"new tokens {new.sum()}, all tokens {(new + prompt).sum()}")
PY
# The limits of the GPU the run had: bf16 790 TFLOP/s either way; HBM 4.3 TB/s on an H200 and
# 3.0 TB/s on an H100 (device-to-device copies measured on the device machines).
hbm=4.3; nvidia-smi -L | grep -q H100 && hbm=3.0
python3 postprocess/iteration_table.py "runs/$name/run.h5" --config "$model/config.json" --hbm-tbs "$hbm" --markdown || true
