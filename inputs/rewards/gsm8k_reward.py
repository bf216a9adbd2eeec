#!/usr/bin/env python3
"""A reward program for quartet (model.reward.kind = command:...): GSM8K's final answers.

    [model.reward]
    kind = command:python3 inputs/rewards/gsm8k_reward.py
    timeout = 60

quartet starts one copy per actor rank and keeps it for the whole run. Each batch arrives as one
JSON line on stdin and is answered with one JSON line on stdout (docs/reward-programs.md):

    {"version": 1, "id": 7, "samples": [{"row": 17, "prompt": "...", "completion": "...",
                                         "answer": "... #### 72", "metadata": {...}}, ...]}
    {"id": 7, "scores": [1.0, 0.0, ...]}

A completion scores 1 when its final answer equals the sample's reference answer as a number,
else 0. The final answer is what follows the last "####" (GSM8K's own marker), or else the last
number in the completion; the reference is what follows "####" in the prompt file's answer (the
GSM8K dataset's form), or the whole answer when it has none. Numbers compare by value: "1,000",
"1000" and "1000.00" are equal; a "$" before the digits and a "." after them are ignored.

Anything else the program has to say goes to stderr (quartet shows its last lines if the run
stops on this reward); stdout carries the replies alone, each flushed at once. It exits at the
end of its input, which is how quartet says the run is over.
"""
import json
import re
import sys
from decimal import Decimal, InvalidOperation

NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


def to_number(text):
    """The value of a number as GSM8K writes it ("1,234", "$5", "-3", "7.50"), or None."""
    cleaned = re.sub(r"[$,]", "", text)
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def final_answer(text):
    """What follows the last "####", else the last number; None when there is no number."""
    if "####" in text:
        text = text.rsplit("####", 1)[1]
        first = NUMBER.search(text)
        return to_number(first.group(0)) if first else None
    numbers = NUMBER.findall(text)
    return to_number(numbers[-1]) if numbers else None


def reference(answer):
    if answer is None:
        return None
    return final_answer(str(answer)) if "####" in str(answer) else to_number(str(answer))


def score(sample):
    want = reference(sample.get("answer"))
    if want is None:
        print(f"gsm8k_reward: row {sample.get('row')} has no numeric answer: {sample.get('answer')!r}",
              file=sys.stderr, flush=True)
        return 0.0
    got = final_answer(sample["completion"])
    return 1.0 if got is not None and got == want else 0.0


def main():
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("version") != 1:
            reply = {"id": request.get("id"), "error": f"protocol version {request.get('version')} is not 1"}
        else:
            reply = {"id": request["id"], "scores": [score(s) for s in request["samples"]]}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
