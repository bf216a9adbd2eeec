"""Preference pairs for sorting digits, from a prompts file of the sort_digits task.

    make_sort_pairs.py PROMPTS.jsonl OUT.jsonl
Each {"prompt": "sort 206=", "answer": "026"} row becomes {"prompt", "chosen", "rejected"}: chosen
is the answer (the digits sorted), rejected a wrong answer made by a rule that turns with the row
(the digits as given, sorted descending, or the sorted digits with one changed), never the answer.
Deterministic: the test data under tests/tune/data was made by it.
"""
import json
import sys


def wrong_answer(index, prompt, answer):
    digits = prompt[len("sort "):-1]
    candidates = [digits, "".join(sorted(answer, reverse=True))]
    k = index % len(answer)
    candidates.append(answer[:k] + str((int(answer[k]) + 1) % 10) + answer[k + 1:])
    for turn in range(3):
        c = candidates[(index + turn) % 3]
        if c != answer:
            return c
    raise ValueError(f"no wrong answer for {prompt}")


def main():
    src, out = sys.argv[1:]
    with open(src) as f, open(out, "w") as g:
        rows = [json.loads(line) for line in f if line.strip()]
        for i, row in enumerate(rows):
            pair = {"prompt": row["prompt"], "chosen": row["answer"],
                    "rejected": wrong_answer(i, row["prompt"], row["answer"])}
            g.write(json.dumps(pair) + "\n")


if __name__ == "__main__":
    main()
