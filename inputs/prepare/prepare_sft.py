#!/usr/bin/env python3
"""Turn a dataset of demonstrations into the file `quartet sft` reads (docs/sft.md).

    python inputs/prepare/prepare_sft.py --model MODEL_DIR --out sft.jsonl DATA [DATA ...]

DATA is a JSONL, Parquet or Arrow file, or a directory of them, as for prepare_prompts.py. Each
row has either
  messages   a chat: a list of {"role": ..., "content": ...} ending with the assistant's reply;
             every assistant turn is learnt (loss), everything else is context, or
  prompt and response   two strings: one user message and the assistant's reply, rendered
             through the chat template (--prompt-format chat), or kept as they are (raw): the
             prompt tokenized with the tokenizer's special tokens, the response without them,
             then the tokenizer's EOS, which is how `quartet sft` reads a plain JSONL file itself.
Other columns are kept as the row's metadata.

A chat is rendered by transformers' apply_chat_template(messages, tokenize=False) and tokenized
by the model's tokenizer.json (the `tokenizers` library, as quartet's tokenizer runs it). Which
tokens are the assistant's:
  turns     (--assistant-mask turns) each assistant turn's text is what the template adds for it:
            the chat up to it rendered with add_generation_prompt=True, against the chat through
            it; the tokens that start inside it are the assistant's (its end-of-turn tokens
            included). The template must render a chat's turns as prefixes of each other, and no
            token may straddle a turn's edge; a row where either fails is refused.
  template  transformers' own mask, apply_chat_template(..., return_assistant_tokens_mask=True),
            for templates that mark the assistant's text with {% generation %}.
  auto      (default) template when the template has {% generation %}, else turns.
The final assistant turn is the row's response: input_ids[:prompt_length] is the chat before it
with the generation prompt (what generation starts from) and must tokenize as a prefix of the
whole; the held-out exact match of `quartet sft` compares the greedy completion with the rest.

The header records the SHA-256 of the tokenizer.json and the chat template, as a prepared
prompts file's does, so that `quartet sft` refuses the file for an actor with another tokenizer
or template. Nothing is fetched. For random:<family> actors (the built-in character tokenizer),
write its files first (`quartet tokenize random: --write-files DIR`) and prepare raw rows.

A row that cannot be used is reported with its file and line (JSONL) or row (Parquet, Arrow);
--on-error fail (default) stops at the first, skip leaves such rows out and counts them.
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_prompts import (Fatal, Model, RowError, a_type, check_messages, input_files, jsonable,  # noqa: E402
                             run_offline, write_prepared)

FORMAT_VERSION = 1
GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="prepare_sft.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="+", metavar="DATA", help="JSONL, Parquet or Arrow files, or directories of them")
    ap.add_argument("--model", required=True, metavar="DIR",
                    help="the actor's model directory (tokenizer.json, tokenizer_config.json, chat template)")
    ap.add_argument("--out", required=True, metavar="FILE", help="the demonstrations file to write (JSONL)")
    ap.add_argument("--format", choices=["auto", "jsonl", "parquet", "arrow"], default="auto",
                    help="the input format (default: by file extension)")
    ap.add_argument("--messages-column", default="messages", metavar="NAME",
                    help="the column with chat messages (default: messages)")
    ap.add_argument("--prompt-column", default="prompt", metavar="NAME", help="the prompt string (default: prompt)")
    ap.add_argument("--response-column", default="response", metavar="NAME",
                    help="the response string (default: response)")
    ap.add_argument("--prompt-format", choices=["auto", "chat", "raw"], default="auto",
                    help="prompt/response rows: chat = a user and an assistant message through the chat "
                         "template, raw = the strings as they are; auto (default) = chat when the model has a template")
    ap.add_argument("--system-prompt", metavar="TEXT",
                    help="a system message put first in every templated chat that has none")
    ap.add_argument("--assistant-mask", choices=["auto", "turns", "template"], default="auto",
                    help="how the assistant's tokens are found in a chat (above; default auto)")
    ap.add_argument("--max-tokens", type=int, metavar="N",
                    help="a row of more tokens is a bad row (sft also refuses rows longer than sft.max_tokens)")
    ap.add_argument("--on-error", choices=["fail", "skip"], default="fail",
                    help="a bad row: stop (default) or leave it out and count it")
    args = ap.parse_args(argv)
    if args.max_tokens is not None and args.max_tokens < 2:
        ap.error(f"--max-tokens must be at least 2, not {args.max_tokens}")
    return args


class Demonstrations:
    """Rows into token ids, loss masks and prompt lengths for one model."""

    def __init__(self, args, model):
        self.args, self.model = args, model
        fmt = args.prompt_format
        self.prompt_format = fmt if fmt != "auto" else ("chat" if model.template is not None else "raw")
        if self.prompt_format == "chat" and model.template is None:
            raise Fatal(f"--prompt-format chat: {model.dir} has no chat template")
        tagged = model.template is not None and GENERATION_TAG.search(model.template) is not None
        self.mask_method = args.assistant_mask if args.assistant_mask != "auto" else ("template" if tagged else "turns")
        if self.mask_method == "template" and model.template is not None and not tagged:
            raise Fatal(f"--assistant-mask template: the chat template of {model.dir} has no {{% generation %}} "
                        "block, so transformers cannot tell the assistant's tokens (use --assistant-mask turns)")
        self.templated = 0

    def render(self, messages, generation_prompt):
        return self.model.tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)

    def turn_spans(self, messages, text):
        """[start, end) of every assistant turn's text in `text`, the whole chat rendered."""
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, through = self.render(messages[:i], True), self.render(messages[:i + 1], False)
            if not (through.startswith(before) and text.startswith(through)):
                raise RowError(f"the chat template does not render turn {i} as a continuation of the turns before it "
                               "(its rendering of a shorter chat is not a prefix of the longer one), so the "
                               "assistant's tokens cannot be told by turns (--assistant-mask template needs "
                               "{% generation %} in the template)")
            spans.append((len(before), len(through)))
        return spans

    def mask_by_turns(self, enc, spans):
        mask = [0] * len(enc.ids)
        for k, (start, end) in enumerate(enc.offsets):
            for s, e in spans:
                if start < s < end or start < e < end:
                    raise RowError(f"token {k} ({enc.tokens[k]!r}) straddles the edge of an assistant turn "
                                   f"(characters {start}..{end}, the turn {s}..{e})")
                if s <= start < e:
                    mask[k] = 1
        return mask

    def mask_by_template(self, messages, ids):
        out = self.model.tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                 return_assistant_tokens_mask=True)
        if list(out["input_ids"]) != ids:
            raise RowError("transformers' tokenizer gives this chat other ids than tokenizer.json does, so its "
                           "assistant mask does not fit them (--assistant-mask turns)")
        return [int(b) for b in out["assistant_masks"]]

    def chat(self, messages):
        column = self.args.messages_column
        check_messages(messages, column)
        messages = [dict(m) for m in messages]
        if self.args.system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.args.system_prompt})
        if messages[-1]["role"] != "assistant":
            raise RowError(f"'{column}' ends with a {messages[-1]['role']} message, not the assistant's reply")
        if self.model.template is None:
            raise RowError(f"a chat needs a chat template, and {self.model.dir} has none")
        try:
            text = self.render(messages, False)
            spans = self.turn_spans(messages, text)
            prompt_text = self.render(messages[:-1], True)
        except RowError:
            raise
        except Exception as e:  # the template's own error (a role it refuses, say)
            raise RowError(f"the chat template refuses it: {e}") from e
        enc = self.model.file_tokenizer.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        mask = self.mask_by_turns(enc, spans) if self.mask_method == "turns" else self.mask_by_template(messages, ids)
        prompt_ids = self.model.file_tokenizer.encode(prompt_text, add_special_tokens=False).ids
        if ids[:len(prompt_ids)] != prompt_ids or len(prompt_ids) >= len(ids):
            raise RowError("the chat before the final reply does not tokenize as the start of the whole chat, so "
                           "generation would not start from the ids the model learns from")
        response = messages[-1]["content"]
        return {"prompt": prompt_text, "response": response if isinstance(response, str) else json.dumps(response),
                "input_ids": ids, "loss_mask": mask, "prompt_length": len(prompt_ids), "messages": jsonable(messages)}

    def raw(self, prompt, response):
        tok = self.model.file_tokenizer
        prompt_ids = tok.encode(prompt, add_special_tokens=True).ids
        response_ids = tok.encode(response, add_special_tokens=False).ids
        eos = self.model.tok.eos_token_id
        if eos is not None:
            response_ids.append(eos)
        ids = prompt_ids + response_ids
        mask = [0] * len(prompt_ids) + [1] * len(response_ids)
        return {"prompt": prompt, "response": response, "input_ids": ids, "loss_mask": mask,
                "prompt_length": len(prompt_ids)}

    def text_field(self, row, column):
        v = row.get(column)
        if not isinstance(v, str):
            raise RowError(f"'{column}' is {a_type(v)}, not a string")
        if not v:
            raise RowError(f"'{column}' is empty")
        return v

    def row(self, row, where):
        a = self.args
        metadata = {k: jsonable(v) for k, v in row.items()
                    if k not in (a.messages_column, a.prompt_column, a.response_column)}
        if row.get(a.messages_column) is not None:
            out = self.chat(row[a.messages_column])
        elif row.get(a.prompt_column) is not None or row.get(a.response_column) is not None:
            prompt, response = self.text_field(row, a.prompt_column), self.text_field(row, a.response_column)
            if self.prompt_format == "chat":
                out = self.chat([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])
            else:
                out = self.raw(prompt, response)
        else:
            raise RowError(f"neither '{a.messages_column}' nor '{a.prompt_column}' and '{a.response_column}' "
                           f"(columns: {', '.join(row) or 'none'})")
        if out["prompt_length"] < 1:
            raise RowError("the prompt tokenizes to no tokens")
        if not any(out["loss_mask"][out["prompt_length"]:]):
            raise RowError("the reply has no tokens to learn")
        if out["loss_mask"][0]:
            raise RowError("the first token is marked as the assistant's, but nothing comes before it")
        if a.max_tokens is not None and len(out["input_ids"]) > a.max_tokens:
            raise RowError(f"the row has {len(out['input_ids'])} tokens, more than --max-tokens {a.max_tokens}")
        out["metadata"] = metadata
        out["origin"] = where
        return out


def header(args, model, demos, sources, written, skipped):
    return {
        "quartet_sft": FORMAT_VERSION,
        "tokenizer": {"sha256": model.tokenizer_sha256, "source": model.tokenizer_json, "vocab_size": len(model.tok)},
        "chat_template": {"applied": demos.templated > 0, "sha256": model.template_sha256,
                          "source": model.template_source},
        "assistant_mask": demos.mask_method if demos.templated > 0 else "response",
        "source": sources,
        "rows": written,
        "skipped": skipped,
        "options": {"prompt_format": demos.prompt_format, "system_prompt": args.system_prompt,
                    "messages_column": args.messages_column, "prompt_column": args.prompt_column,
                    "response_column": args.response_column, "max_tokens": args.max_tokens,
                    "on_error": args.on_error},
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "program": "quartet inputs/prepare/prepare_sft.py",
        "versions": model.versions,
    }


def prepare(args):
    model = Model(args.model)
    demos = Demonstrations(args, model)
    files = input_files(args.data, args.format)

    def row(record, where):
        prepared = demos.row(record, where)
        demos.templated += "messages" in prepared
        return prepared

    written, _ = write_prepared(args.out, files, row,
                                lambda sources, written, skipped: header(args, model, demos, sources, written, skipped),
                                args.on_error, "prepare_sft")
    print(f"prepare_sft: {written} demonstrations ({demos.templated} through the chat template, assistant tokens by "
          f"{demos.mask_method if demos.templated else 'response'}) from {len(files)} file(s) -> {args.out}")


def main(argv=None):
    return run_offline(prepare, parse_args(argv), "prepare_sft")


if __name__ == "__main__":
    sys.exit(main())
