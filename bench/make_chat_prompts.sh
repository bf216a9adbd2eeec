#!/usr/bin/env bash
# The chat-rendered prompts file of bench/gpu_families_check.sh, made on the CPU machine (it needs
# transformers, which the pinned venv has and the GPU image may not):
#   bash bench/make_chat_prompts.sh OUT.jsonl     (after make build; PYTHON= the pinned venv's python)
# The built-in character tokenizer's files (what random: models read) get a ChatML template, and
# inputs/prepare/prepare_prompts.py renders the sort-digits prompts as system + user messages.
set -euo pipefail
out=${1:?the prompts file to write}
python=${PYTHON:-python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
build/quartet tokenize random: --write-files "$dir/tokenizer"
cat > "$dir/tokenizer/chat_template.jinja" <<'JINJA'
{% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
JINJA
"$python" - "$dir/rows.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for line in open("inputs/prompts/sort_digits.jsonl"):
        row = json.loads(line)
        messages = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": row["prompt"]}]
        f.write(json.dumps({"messages": messages, "answer": row["answer"]}) + "\n")
PY
"$python" inputs/prepare/prepare_prompts.py --model "$dir/tokenizer" --out "$out" --prompt-format chat "$dir/rows.jsonl"
