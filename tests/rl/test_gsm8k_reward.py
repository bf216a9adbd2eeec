"""inputs/rewards/gsm8k_reward.py, the example reward program: its answer extraction on a table
of answer strings in the forms models and GSM8K write them, and the program itself over its
pipes as quartet speaks to it (docs/reward-programs.md)."""
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "inputs", "rewards", "gsm8k_reward.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gsm8k_reward  # noqa: E402

# (completion, the prompt file's answer, score)
TABLE = [
    ("She has 3 + 4 = 7 pens.\n#### 7", "She has 3 + 4 = 7 pens.\n#### 7", 1.0),
    ("So the answer is 72.", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),
    ("#### 1,000", "1000", 1.0),
    ("The total is $1,000.00.", "x\n#### 1000", 1.0),
    ("It is -4 degrees now.", "#### -4", 1.0),
    ("7.50", "#### 7.5", 1.0),
    ("#### 72 apples, not 80", "#### 72", 1.0),  # after ####: the first number
    ("72 apples, or maybe 80", "#### 72", 0.0),  # without ####: the last number
    ("12 then 13", "12", 0.0),
    ("5-3", "#### 2", 0.0),  # "-3" is the last number
    ("no number here", "#### 5", 0.0),
    ("", "#### 5", 0.0),
    ("#### 5", None, 0.0),  # no reference: 0, and a line on stderr
]


class Extraction(unittest.TestCase):
    def test_table(self):
        for completion, answer, want in TABLE:
            with self.subTest(completion=completion, answer=answer):
                self.assertEqual(gsm8k_reward.score({"row": 0, "completion": completion, "answer": answer}), want)


class Protocol(unittest.TestCase):
    def test_batches_over_pipes(self):
        proc = subprocess.Popen([sys.executable, SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        def ask(request):
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())
        try:
            self.assertEqual(ask({"version": 1, "id": 0, "samples": []}), {"id": 0, "scores": []})
            samples = [{"row": i, "prompt": "Q: ?", "completion": c, "answer": a, "metadata": {"source": "t"}}
                       for i, (c, a, _) in enumerate(TABLE)]
            self.assertEqual(ask({"version": 1, "id": 1, "samples": samples}),
                             {"id": 1, "scores": [want for _, _, want in TABLE]})
            reply = ask({"version": 2, "id": 2, "samples": []})
            self.assertEqual(reply["id"], 2)
            self.assertIn("version 2", reply["error"])
        finally:
            proc.stdin.close()  # the end of input: the program exits
            self.assertEqual(proc.wait(timeout=30), 0)
        self.assertIn("row 12 has no numeric answer", proc.stderr.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
