#!/usr/bin/env python3
"""Preference pairs for the sort-digits task, labelled by its rule (docs/rm.md).

    python inputs/prepare/make_sort_pairs.py --prompts inputs/prompts/sort_digits.jsonl \\
        --out inputs/rm/sort_digits_pairs.jsonl [--seed 1] [--pairs-per-prompt 2] [--margins]

Each prompt ("sort 3817=") gets --pairs-per-prompt plain pairs {"prompt", "chosen", "rejected"}
(the file `quartet rm` reads as rm.data or rm.heldout; docs/data.md, "Pair files"). The responses
are the sorted digits ("1378") and corruptions of them:
  swap     two neighbouring different digits swapped (unsorted)
  reverse  the digits in descending order
  prompt   the digits as the prompt gives them (when not already sorted)
  shuffle  the digits in a random order other than sorted
  drop     one digit left out
  extra    one digit added, in sorted place
  replace  one digit changed to another, in sorted place
Each response is scored as `model.reward.kind = rule:sort_digits` scores it (rl/rewards/rule_rewards.cpp:
1 for the exact answer, else partial credit for characters in place, characters in common, and
digits), and the better one of a pair is the chosen one. The first pair of a prompt sets the
exact answer against a corruption; the others set two responses apart whose scores differ by at
least --min-gap (either may be the exact answer). --margins writes each pair's score difference
as its "margin" (the Bradley-Terry margin of rm.margin). The same --seed writes the same file,
byte for byte.
"""
import argparse
import json
import random
import sys

IN_PLACE, COMMON, DIGITS = 0.6, 0.25, 0.15  # rl/rewards/rule_rewards.cpp's partial credit


def rule_score(answer, got):
    """rule:sort_digits of `got` against the exact `answer` (rl/rewards/rule_rewards.cpp RuleReward::score)."""
    got = got.split("\n", 1)[0]
    if not got:
        return 0.0
    if got == answer:
        return 1.0
    longer = max(len(answer), len(got))
    in_place = sum(a == b for a, b in zip(answer, got))
    counts = {}
    for c in answer:
        counts[c] = counts.get(c, 0) + 1
    common = 0
    for c in got:
        if counts.get(c, 0) > 0:
            counts[c] -= 1
            common += 1
    digits = sum(c.isdigit() for c in got)
    return IN_PLACE * in_place / longer + COMMON * common / longer + DIGITS * digits / len(got)


def corruptions(digits, answer, rng):
    """Every corruption of the sorted `answer` this prompt allows, by kind (none equals it)."""
    out = {}
    swaps = [i for i in range(len(answer) - 1) if answer[i] != answer[i + 1]]
    if swaps:
        i = rng.choice(swaps)
        out["swap"] = answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:]
        out["reverse"] = answer[::-1]
        shuffled = list(answer)
        while "".join(shuffled) == answer:
            rng.shuffle(shuffled)
        out["shuffle"] = "".join(shuffled)
    if digits != answer:
        out["prompt"] = digits
    i = rng.randrange(len(answer))
    out["drop"] = answer[:i] + answer[i + 1:]
    out["extra"] = "".join(sorted(answer + str(rng.randrange(10))))
    i = rng.randrange(len(answer))
    other = rng.choice([d for d in "0123456789" if d != answer[i]])
    out["replace"] = "".join(sorted(answer[:i] + other + answer[i + 1:]))
    return {k: v for k, v in out.items() if v != answer and v}


def pairs_of(prompt, rng, count, min_gap):
    digits = prompt[len("sort "):-1]
    answer = "".join(sorted(digits))
    bad = corruptions(digits, answer, rng)
    kinds = sorted(bad)
    out = [(answer, bad[rng.choice(kinds)])]
    pool = [answer] + [bad[k] for k in kinds]
    tries = 0
    while len(out) < count and tries < 100:
        tries += 1
        a, b = rng.sample(pool, 2)
        sa, sb = rule_score(answer, a), rule_score(answer, b)
        if a == b or abs(sa - sb) < min_gap:
            continue
        out.append((a, b) if sa > sb else (b, a))
    return answer, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="JSONL with a \"prompt\" field a line (sort-digits prompts)")
    ap.add_argument("--out", required=True, help="the pairs file to write")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pairs-per-prompt", type=int, default=2)
    ap.add_argument("--min-gap", type=float, default=0.15, help="least score difference of the later pairs")
    ap.add_argument("--margins", action="store_true", help="write each pair's score difference as its margin")
    a = ap.parse_args()
    if a.pairs_per_prompt < 1:
        sys.exit("make_sort_pairs.py: --pairs-per-prompt must be at least 1")
    rng = random.Random(a.seed)
    rows = 0
    with open(a.prompts) as src, open(a.out, "w") as dst:
        for line_no, line in enumerate(src, 1):
            if not line.strip():
                continue
            prompt = json.loads(line).get("prompt")
            if not (isinstance(prompt, str) and prompt.startswith("sort ") and prompt.endswith("=")
                    and prompt[5:-1].isdigit()):
                sys.exit(f"make_sort_pairs.py: {a.prompts}:{line_no}: not a sort-digits prompt: {prompt!r}")
            answer, pairs = pairs_of(prompt, rng, a.pairs_per_prompt, a.min_gap)
            for chosen, rejected in pairs:
                row = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
                if a.margins:
                    row["margin"] = round(rule_score(answer, chosen) - rule_score(answer, rejected), 6)
                dst.write(json.dumps(row) + "\n")
                rows += 1
    print(f"make_sort_pairs.py: {rows} pairs -> {a.out}")


if __name__ == "__main__":
    main()
