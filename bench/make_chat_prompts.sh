#!/usr/bin/env bash
# The chat-rendered prompts file of bench/gpu_families_check.sh, made on the CPU machine (it needs
# transformers, which the pinned venv has and the GPU image may not):
#   bash bench/make_chat_prompts.sh OUT.jsonl TOKENIZER_DIR   (after make build; PYTHON= the pinned venv's python)
# The built-in character tokenizer's files go to TOKENIZER_DIR with a ChatML template (the
# families check puts them in its model directories), and inputs/prepare/prepare_prompts.py
# renders the sort-digits prompts through it as system + user messages.
set -euo pipefail
out=${1:?the prompts file to write}
tokenizer=${2:?the directory to write the tokenizer files to}
python=${PYTHON:-python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
build/quartet tokenize random: --write-files "$tokenizer"
ln -s "$(cd "$tokenizer" && pwd)" "$dir/tokenizer"
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
