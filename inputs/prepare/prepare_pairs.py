#!/usr/bin/env python3
"""Turn a preference dataset into the pairs file `quartet rm` and `quartet dpo` read (docs/data.md).

    python inputs/prepare/prepare_pairs.py --model MODEL_DIR --out pairs.jsonl DATA [DATA ...]

DATA is a JSONL, Parquet or Arrow file, or a directory of them, read as prepare_prompts.py reads
them. Each row is one (prompt, chosen, rejected) pair in one of the shapes the field uses:
  text      prompt, chosen and rejected strings;
  chat      prompt a list of messages {"role", "content"}, chosen and rejected the reply: a string
            or a list of messages (TRL's explicit prompt);
  chats     no prompt; chosen and rejected whole chats that share every message but their last,
            an assistant reply (TRL's implicit prompt, OpenRLHF);
  HH        no prompt; chosen and rejected Anthropic HH-RLHF transcripts
            ("\\n\\nHuman: ...\\n\\nAssistant: ..."), equal up to their last "\\n\\nAssistant:".
and optionally a margin (--margin-column, default "margin": a number, the Bradley–Terry margin
of the pair) and other columns, kept as the row's metadata.

Each side becomes prompt ids and response ids, the response being what the policy would
generate after the prompt:
  chat      the prompt is rendered as prepare_prompts.py renders it,
            apply_chat_template(prompt, add_generation_prompt=True); the response is what
            apply_chat_template(prompt + reply) renders after that text (the reply and the
            template's end-of-turn tokens). The whole conversation is tokenized at once and cut
            where the prompt's ids end, so prompt + response ids are the ids
            apply_chat_template(prompt + reply, tokenize=True) gives; where the conversation's
            ids do not begin with the prompt's (a token merging across the boundary), the reply
            is tokenized alone and the rows are counted in a note.
  raw       the prompt is tokenized with the tokenizer's special tokens (a BOS, say), the reply
            without, followed by the tokenizer's end-of-sequence token (--no-eos leaves it off),
            the token generation stops at.
--prompt-format auto (the default) is chat when the model has a chat template, raw otherwise;
text and HH rows follow it (a text prompt is one user message, a text reply one assistant
message; an HH transcript is split into user and assistant messages), chat rows need the
template.

A row that cannot be used (a missing or mistyped column, an empty response, chosen and rejected
with the same ids, chats that differ before their last message, a side longer than
--max-length tokens, a margin that is not a finite number) is reported with its file and line
(JSONL) or row (Parquet, Arrow: 0-based). --on-error fail (the default) stops at the first; skip
leaves such rows out and prints how many. The header records the SHA-256 of the tokenizer.json and
of the chat template, so that quartet refuses the file for a model with another.
"""
import argparse
import datetime
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_prompts as pp  # noqa: E402  (the readers, the model's identity, the writer)

FORMAT_VERSION = 1
PROGRAM = "prepare_pairs"
HH_HUMAN, HH_ASSISTANT = "\n\nHuman:", "\n\nAssistant:"
RowError, Fatal = pp.RowError, pp.Fatal


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="prepare_pairs.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="+", metavar="DATA", help="JSONL, Parquet or Arrow files, or directories of them")
    ap.add_argument("--model", required=True, metavar="DIR",
                    help="the model's directory (tokenizer.json, tokenizer_config.json, chat template)")
    ap.add_argument("--out", required=True, metavar="FILE", help="the pairs file to write (JSONL)")
    ap.add_argument("--format", choices=["auto", "jsonl", "parquet", "arrow"], default="auto",
                    help="the input format (default: by file extension)")
    ap.add_argument("--prompt-column", default="prompt", metavar="NAME", help="default: prompt")
    ap.add_argument("--chosen-column", default="chosen", metavar="NAME", help="default: chosen")
    ap.add_argument("--rejected-column", default="rejected", metavar="NAME", help="default: rejected")
    ap.add_argument("--margin-column", default="margin", metavar="NAME",
                    help="the column with a pair's Bradley–Terry margin, a number (default: margin); "
                         "a row without one has none")
    ap.add_argument("--prompt-format", choices=["auto", "chat", "raw"], default="auto",
                    help="text and HH rows: chat = through the chat template, raw = the strings as "
                         "they are; auto (default) = chat when the model has a template")
    ap.add_argument("--system-prompt", metavar="TEXT",
                    help="a system message put first in every templated prompt that has none")
    ap.add_argument("--no-eos", action="store_true",
                    help="raw responses: do not append the tokenizer's end-of-sequence token")
    ap.add_argument("--max-length", type=int, metavar="N",
                    help="a pair whose prompt + longer response has more tokens is a bad row")
    ap.add_argument("--on-error", choices=["fail", "skip"], default="fail",
                    help="a bad row: stop (default) or leave it out and count it")
    args = ap.parse_args(argv)
    if args.max_length is not None and args.max_length < 2:
        ap.error(f"--max-length must be at least 2, not {args.max_length}")
    return args


# ---- the shapes of a row ------------------------------------------------------------------------

def hh_messages(text, column):
    """An HH-RLHF transcript as messages: "\\n\\nHuman: a\\n\\nAssistant: b" -> user a, assistant b."""
    if not text.startswith(HH_HUMAN):
        raise RowError(f"'{column}' is not an HH transcript (it does not begin with {HH_HUMAN!r})")
    messages, rest = [], text
    while rest:
        for marker, role in ((HH_HUMAN, "user"), (HH_ASSISTANT, "assistant")):
            if rest.startswith(marker):
                rest = rest[len(marker):]
                ends = [i for i in (rest.find(HH_HUMAN), rest.find(HH_ASSISTANT)) if i >= 0]
                end = min(ends) if ends else len(rest)
                messages.append({"role": role, "content": rest[:end].strip()})
                rest = rest[end:]
                break
        else:
            raise RowError(f"'{column}' is not an HH transcript")
    return messages


def hh_split(text, column):
    """(prompt, reply) of a transcript: the prompt up to and including its last Assistant: marker."""
    at = text.rfind(HH_ASSISTANT)
    if at < 0 or text.find(HH_HUMAN) != 0:
        raise RowError(f"'{column}' is not an HH transcript (Human: then Assistant: turns)")
    return text[:at + len(HH_ASSISTANT)], text[at + len(HH_ASSISTANT):]


def reply_messages(value, column):
    """A reply as messages: a string is one assistant message; a list must end with one."""
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    pp.check_messages(value, column)
    if value[-1]["role"] != "assistant":
        raise RowError(f"'{column}' ends with a {value[-1]['role']} message, not the assistant's reply")
    return [dict(m) for m in value]


class Pair:
    """One row as (kind, prompt, chosen, rejected): kind "chat" (prompt a list of messages,
    replies lists of messages) or "raw" (strings)."""

    def __init__(self, args, row, templated):
        a = args
        prompt, chosen, rejected = row.get(a.prompt_column), row.get(a.chosen_column), row.get(a.rejected_column)
        for column, value in ((a.chosen_column, chosen), (a.rejected_column, rejected)):
            if value is None:
                raise RowError(f"no '{column}' (columns: {', '.join(row) or 'none'})")
            if not isinstance(value, (str, list)):
                raise RowError(f"'{column}' is {pp.a_type(value)}, not a string or a list of messages")
        if isinstance(prompt, list):  # chat: an explicit prompt
            pp.check_messages(prompt, a.prompt_column)
            self.set("chat", [dict(m) for m in prompt], reply_messages(chosen, a.chosen_column),
                     reply_messages(rejected, a.rejected_column))
        elif prompt is not None:  # text
            if not isinstance(prompt, str):
                raise RowError(f"'{a.prompt_column}' is {pp.a_type(prompt)}, not a string or a list of messages")
            if not prompt:
                raise RowError(f"'{a.prompt_column}' is empty")
            for column, value in ((a.chosen_column, chosen), (a.rejected_column, rejected)):
                if not isinstance(value, str):
                    raise RowError(f"'{column}' is {pp.a_type(value)}; with a string prompt the replies are strings")
            if templated:
                self.set("chat", [{"role": "user", "content": prompt}], reply_messages(chosen, a.chosen_column),
                         reply_messages(rejected, a.rejected_column))
            else:
                self.set("raw", prompt, chosen, rejected)
        elif isinstance(chosen, list) and isinstance(rejected, list):  # chats with an implicit prompt
            c, r = reply_messages(chosen, a.chosen_column), reply_messages(rejected, a.rejected_column)
            if c[:-1] != r[:-1]:
                raise RowError(f"'{a.chosen_column}' and '{a.rejected_column}' differ before their last message "
                               "(the pair's prompt is every message but the assistant's reply)")
            if not c[:-1]:
                raise RowError(f"'{a.chosen_column}' holds only the reply: no prompt")
            self.set("chat", c[:-1], c[-1:], r[-1:])
        elif isinstance(chosen, str) and isinstance(rejected, str):  # HH transcripts
            pc, rc = hh_split(chosen, a.chosen_column)
            pr, rr = hh_split(rejected, a.rejected_column)
            if pc != pr:
                raise RowError(f"'{a.chosen_column}' and '{a.rejected_column}' differ before their last "
                               f"{HH_ASSISTANT.strip()!r} turn (HH transcripts share the conversation before it)")
            if templated:
                c, r = hh_messages(chosen, a.chosen_column), hh_messages(rejected, a.rejected_column)
                self.set("chat", c[:-1], c[-1:], r[-1:])
            else:
                self.set("raw", pc, rc, rr)
        else:
            raise RowError(f"no '{a.prompt_column}', and '{a.chosen_column}' and '{a.rejected_column}' are not "
                           "both chats (lists of messages) or both HH transcripts (strings)")

    def set(self, kind, prompt, chosen, rejected):
        self.kind, self.prompt, self.chosen, self.rejected = kind, prompt, chosen, rejected


# ---- the model's side -----------------------------------------------------------------------------

class PairPreparer:
    def __init__(self, args, model):
        self.args, self.model = args, model
        fmt = args.prompt_format
        self.prompt_format = fmt if fmt != "auto" else ("chat" if model.template is not None else "raw")
        if self.prompt_format == "chat" and model.template is None:
            raise Fatal(f"--prompt-format chat: {model.dir} has no chat template "
                        "(tokenizer_config.json chat_template, or chat_template.jinja)")
        self.eos = None if args.no_eos else model.tok.eos_token_id
        self.templated = 0      # rows rendered through the chat template
        self.split_differs = 0  # chat rows whose conversation's ids do not begin with the prompt's
        self.with_margin = 0

    def render_chat(self, prompt, reply):
        """(prompt text, prompt ids, response text, response ids) through the template."""
        tok = self.model.tok
        try:
            prompt_text = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            whole = tok.apply_chat_template(prompt + reply, tokenize=False)
        except Exception as e:  # the template's own error (a role it refuses, say)
            raise RowError(f"the chat template refuses it: {e}") from e
        if not whole.startswith(prompt_text):
            raise RowError("the chat template does not render the conversation as the prompt (with its "
                           "generation prompt) followed by the reply")
        prompt_ids = self.model.encode(prompt_text, add_special_tokens=False)
        whole_ids = self.model.encode(whole, add_special_tokens=False)
        response = whole[len(prompt_text):]
        if whole_ids[:len(prompt_ids)] == prompt_ids:
            return prompt_text, prompt_ids, response, whole_ids[len(prompt_ids):], False
        return prompt_text, prompt_ids, response, self.model.encode(response, add_special_tokens=False), True

    def render_raw(self, prompt, reply):
        prompt_ids = self.model.encode(prompt, add_special_tokens=True)
        ids = self.model.encode(reply, add_special_tokens=False) if reply else []
        return prompt, prompt_ids, reply, ids + ([self.eos] if self.eos is not None else []), False

    def sides(self, pair):
        if pair.kind == "raw":
            return self.render_raw(pair.prompt, pair.chosen), self.render_raw(pair.prompt, pair.rejected)
        if self.model.template is None:
            raise RowError(f"a chat needs a chat template, and {self.model.dir} has none")
        prompt = pair.prompt
        if self.args.system_prompt is not None and prompt[0]["role"] != "system":
            prompt = [{"role": "system", "content": self.args.system_prompt}] + prompt
        pair.prompt = prompt
        return self.render_chat(prompt, pair.chosen), self.render_chat(prompt, pair.rejected)

    def margin(self, row):
        m = row.get(self.args.margin_column)
        if m is None:
            return None
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m):
            raise RowError(f"'{self.args.margin_column}' is {m!r}, not a finite number")
        return float(m)

    def row(self, row, where):
        a = self.args
        pair = Pair(a, row, self.prompt_format == "chat")
        margin = self.margin(row)
        chosen, rejected = self.sides(pair)
        prompt_text, prompt_ids = chosen[0], chosen[1]
        if not prompt_ids:
            raise RowError("the prompt tokenizes to no tokens")
        for side, (_, _, _, ids, _) in (("chosen", chosen), ("rejected", rejected)):
            if not ids:
                raise RowError(f"the {side} response tokenizes to no tokens")
        if chosen[3] == rejected[3]:
            raise RowError("chosen and rejected are the same response (the same token ids): no preference")
        longest = len(prompt_ids) + max(len(chosen[3]), len(rejected[3]))
        if a.max_length is not None and longest > a.max_length:
            raise RowError(f"the prompt and its longer response have {longest} tokens, more than --max-length {a.max_length}")
        out = {"prompt": prompt_text, "prompt_ids": prompt_ids, "chosen": chosen[2], "chosen_ids": chosen[3],
               "rejected": rejected[2], "rejected_ids": rejected[3]}
        if margin is not None:
            out["margin"] = margin
            self.with_margin += 1
        if pair.kind == "chat":
            out["messages"] = pp.jsonable(pair.prompt)
            self.templated += 1
            self.split_differs += chosen[4] + rejected[4]
        skip = {a.prompt_column, a.chosen_column, a.rejected_column, a.margin_column}
        out["metadata"] = {k: pp.jsonable(v) for k, v in row.items() if k not in skip}
        out["origin"] = where
        return out


def header(args, model, prep, sources, written, skipped):
    return {
        "quartet_pairs": FORMAT_VERSION,
        "tokenizer": {"sha256": model.tokenizer_sha256, "source": model.tokenizer_json, "vocab_size": len(model.tok)},
        "chat_template": {"applied": prep.templated > 0, "sha256": model.template_sha256,
                          "source": model.template_source},
        "source": sources,
        "rows": written,
        "skipped": skipped,
        "margins": prep.with_margin,
        "options": {"prompt_format": prep.prompt_format, "system_prompt": args.system_prompt,
                    "prompt_column": args.prompt_column, "chosen_column": args.chosen_column,
                    "rejected_column": args.rejected_column, "margin_column": args.margin_column,
                    "eos_appended": prep.eos, "max_length": args.max_length, "on_error": args.on_error},
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "program": "quartet inputs/prepare/prepare_pairs.py",
        "versions": model.versions,
    }


def prepare(args):
    model = pp.Model(args.model)
    prep = PairPreparer(args, model)
    files = pp.input_files(args.data, args.format)
    written, _ = pp.write_prepared(
        args.out, files, prep.row,
        lambda sources, written, skipped: header(args, model, prep, sources, written, skipped), args.on_error, PROGRAM)
    pp.note_transformers_differ(model, PROGRAM)
    if prep.split_differs:
        print(f"{PROGRAM}: note: for {prep.split_differs} response(s) the conversation's ids do not begin with the "
              "prompt's (a token merges across the boundary); those responses were tokenized alone")
    print(f"{PROGRAM}: {written} pairs ({prep.templated} rendered through the chat template, {prep.with_margin} "
          f"with a margin) from {len(files)} file(s) -> {args.out}")


def main(argv=None):
    return pp.run_offline(prepare, parse_args(argv), PROGRAM)


if __name__ == "__main__":
    sys.exit(main())
