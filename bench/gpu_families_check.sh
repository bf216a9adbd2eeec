#!/usr/bin/env bash
# Real model shapes through `quartet train` on one GPU: a Qwen3-0.6B-shaped and a Llama-2-shaped
# (TinyLlama-1.1B) model (inputs/models/*/config.json) as Hugging Face directories that
# transformers writes here with random weights in bf16, holding the tokenizer files and chat
# template the prompts were rendered with; GRPO against exact match with the row's answer, on
# that chat-rendered prompts file. Both are made on the CPU machine by bench/make_chat_prompts.sh
# and carried (e.g. in .gpu/): CHAT_PROMPTS is the prompts file, CHAT_TOKENIZER the tokenizer dir.
# Run after `source .gpu/env.sh`; logs and run files in $OUT. ITERATIONS (4) per model.
#   CHAT_PROMPTS=.gpu/chat_prompts.jsonl CHAT_TOKENIZER=.gpu/chat_tokenizer bash bench/gpu_families_check.sh
set -uo pipefail
# shellcheck source=bench/gpu_quartet_run.sh
source bench/gpu_quartet_run.sh  # $OUT, t(), quartet built
: "${CHAT_PROMPTS:?a prepared, chat-rendered prompts file}"
: "${CHAT_TOKENIZER:?the tokenizer files and chat template the prompts were rendered with}"
deck=runs/families.deck; mkdir -p runs
cat > "$deck" <<DECK
[run]
name = families
iterations = ${ITERATIONS:-4}
[placement]
mode = colocated
actor = 1
critic = 0
reference = 1
reward = 0
[dist]
backend = auto
device = auto
[model.actor]
dtype = bfloat16
lr = 1e-6
[model.reference]
dtype = bfloat16
[reward]
terms = match
[algorithm]
name = grpo
samples_per_prompt = 8
minibatch = 128
epochs = 1
[rollout]
prompts = $CHAT_PROMPTS
batch = 16
micro_batch = 0
score_micro_batch = 16
max_prompt_tokens = 128
max_new_tokens = 64
[train]
micro_batch = 16
[checkpoint]
at_end = false
[output]
sample_every = 1
DECK
for shape in qwen3-0.6b llama2-1.1b; do
  model=runs/model-$shape
  python3 - "inputs/models/$shape/config.json" "$model" <<'PY'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
config = AutoConfig.from_pretrained(sys.argv[1])
torch.manual_seed(0)
AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16).save_pretrained(sys.argv[2])
PY
  cp "$CHAT_TOKENIZER"/* "$model/"
  echo "== $shape ($(du -sh "$model" | cut -f1) written by transformers)"
  timeout 300 mpirun --oversubscribe --bind-to none -np 1 build-gpu/quartet train "$deck" \
    --set "run.out=runs/families-$shape" --set "model.actor.path=$model" \
    --set "model.reference.path=$model" > "$OUT/families_$shape.log" 2>&1
  echo "exit $?"
  grep -E "^iter|^train:|^model|^  [a-z]|prompts|rror" "$OUT/families_$shape.log" | tail -16
  mkdir -p "$OUT/families-$shape"; cp "runs/families-$shape/run.h5" "$OUT/families-$shape/" 2>/dev/null
  build-gpu/quartet inspect "runs/families-$shape/run.h5" 2>&1 | head -12
  t "$shape"
done
