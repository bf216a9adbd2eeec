"""What the reward-program tests run: the rule reward sort_digits written again in Python (it
must give the very doubles quartet's rule:sort_digits gives, src/rl/rule_rewards.cpp), a
reward program speaking the command: protocol, and an HTTP server speaking the http: one
(docs/reward-programs.md). Both misbehave on request, one way per mode.

    python3 reward_fixtures.py program MODE [--pid-dir D]     # a command: program (its pid in D/)
MODE slow answers as ok does, each batch after the third three seconds late: iterations that last
(check_resume.py's double signal, sent after iteration 3) without the work of a larger model, and
without three idle ranks waiting through the iterations before.
The server is started in-process by check_reward_programs.py (start_server).
"""
import http.server
import json
import os
import signal
import sys
import threading
import time
from collections import Counter

# rule_rewards.cpp's weights: characters in place, characters in common, digits.
IN_PLACE, COMMON, DIGITS = 0.6, 0.25, 0.15


def sort_digits_score(answer, completion):
    """rule:sort_digits's score, operation for operation (the alphabet is ASCII)."""
    got = completion.split("\n", 1)[0]
    if not got:
        return 0.0
    if got == answer:
        return 1.0
    longer = float(max(len(answer), len(got)))
    in_place = sum(1 for a, b in zip(answer, got) if a == b)
    counts = Counter(answer)
    common = digits = 0
    for c in got:
        if counts[c] > 0:
            counts[c] -= 1
            common += 1
        digits += "0" <= c <= "9"
    return IN_PLACE * in_place / longer + COMMON * common / longer + DIGITS * digits / len(got)


def scores_of(samples):
    return [sort_digits_score(s["answer"], s["completion"]) for s in samples]


# ---- the command: program -------------------------------------------------------------------

def program(mode, pid_dir):
    if pid_dir:
        open(os.path.join(pid_dir, str(os.getpid())), "w").close()
    if mode == "exit_at_start":
        print("reward_fixtures: cannot load the checker: no file 'checker.bin'", file=sys.stderr, flush=True)
        sys.exit(3)
    batches = 0
    for line in sys.stdin:
        request = json.loads(line)
        assert request["version"] == 1, request
        samples = request["samples"]
        reply = {"id": request["id"], "scores": scores_of(samples)}
        if samples:
            batches += 1
            print(f"reward_fixtures: batch {batches}: {len(samples)} samples, rows {samples[0]['row']}..",
                  file=sys.stderr, flush=True)
            if mode == "crash" and batches == 2:
                print("reward_fixtures: about to divide by zero", file=sys.stderr, flush=True)
                print(1 / 0)
            if mode == "garbage":
                print("Loading the checker... done", flush=True)
                continue
            if mode == "wrong_count":
                reply["scores"] = reply["scores"][:-1]
            if mode == "bad_score":
                print(f"reward_fixtures: bad score for row {samples[2]['row']}", file=sys.stderr, flush=True)
                reply["scores"][2] = "1.0"
            if mode == "sleep":
                time.sleep(120)
            if mode == "endless":  # a reply line that never ends
                while True:
                    sys.stdout.write("7" * 65536)
                    sys.stdout.flush()
            if mode == "nan":  # what json.dumps writes for float('nan')
                reply["scores"][2] = float("nan")
            if mode == "slow" and batches > 3:
                time.sleep(3.0)
            if mode == "exit_after_reply":
                print(json.dumps(reply), flush=True)
                sys.exit(0)
        print(json.dumps(reply), flush=True)


# ---- the http: server -----------------------------------------------------------------------

class Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    requests = 0

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        Handler.requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        samples = body["samples"]
        if Handler.mode == "close":
            self.close_connection = True
            return  # nothing written: the client sees the connection closed without a response
        if Handler.mode == "status500":
            return self.reply(500, "Traceback (most recent call last):\n  File \"rm.py\", line 9\nKeyError: 'query'\n")
        if Handler.mode == "garbage":
            return self.reply(200, "<html>Bad Gateway</html>\n")
        if Handler.mode == "wrong_count":
            return self.reply(200, json.dumps({"rewards": scores_of(samples)[:-1]}))
        if Handler.mode == "nan":
            scores = scores_of(samples)
            scores[2] = float("nan")
            return self.reply(200, json.dumps({"rewards": scores}))
        if Handler.mode == "endless":  # a body announced as 1 TB, sent until the client hangs up
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10 ** 12))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"7" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                return
        # OpenRLHF's fields must say what the samples say.
        openrlhf = ([s["prompt"] + s["completion"] for s in samples], [s["prompt"] for s in samples],
                    [s["answer"] if s["answer"] is not None else "" for s in samples])
        if (body["query"], body["prompts"], body["labels"]) != openrlhf or body["version"] != 1:
            return self.reply(400, "query, prompts or labels disagree with samples\n")
        self.reply(200, json.dumps({"rewards": scores_of(samples)}))

    def reply(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start_server(mode):
    """An HTTP server on 127.0.0.1 and a free port, in a thread; returns (server, url)."""
    Handler.mode = mode
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/score"


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:]
    pid_dir = args[args.index("--pid-dir") + 1] if "--pid-dir" in args else None
    program(args[1], pid_dir)
