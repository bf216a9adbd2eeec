#!/usr/bin/env python3
"""Turn a dataset into the prompts file `quartet train` reads (docs/data.md).

    python inputs/prepare/prepare_prompts.py --model MODEL_DIR --out prompts.jsonl DATA [DATA ...]

DATA is a JSONL, Parquet or Arrow file, or a directory of them (shards, read in name order;
a `datasets` save_to_disk directory works). Each row has either
  messages   a chat: a list of {"role": ..., "content": ...}, or
  prompt     a string, wrapped as one user message and rendered through the chat template
             (--prompt-format chat) or kept as it is (raw),
plus, optionally, an answer column (--answer-column, default "answer"; kept as given, e.g. a
GSM8K "... #### 72") and any other columns, kept as the row's metadata.

Each prompt is rendered with the model's own chat template by transformers'
apply_chat_template(..., add_generation_prompt=True, tokenize=False) and tokenized by the model's
tokenizer.json run by the `tokenizers` library itself, as quartet's own tokenizer runs it. For
most models these are the ids apply_chat_template(..., tokenize=True) gives; where transformers
builds its own pipeline instead of the file's (tokenizer_config.json naming LlamaTokenizer, as
Llama-2 and Mistral directories do, can give other ids after a special token or for a leading
space), the rows where the two differ are counted and reported, and the file holds the ids of
tokenizer.json. Raw prompts are tokenized with the special tokens
the tokenizer adds (a BOS, say), as `train` tokenizes a plain prompts file. The output's header
records the SHA-256 of the tokenizer.json and of the chat template, so that `train` refuses the
file for an actor with another tokenizer or template. Nothing is fetched: the model is a local
directory and the Hugging Face libraries run offline.

For random:<family> actors (quartet's built-in character tokenizer), write that tokenizer's
files first and prepare raw prompts with them:
    build/quartet tokenize random: --write-files builtin-tokenizer
    python inputs/prepare/prepare_prompts.py --model builtin-tokenizer --out p.jsonl data.jsonl

A row that cannot be used (no messages or prompt, a value of the wrong type, an empty chat or
prompt, more than --max-prompt-tokens tokens) is reported with its file and line (JSONL) or row
(Parquet, Arrow: 0-based). --on-error fail (the default) stops at the first; skip leaves such
rows out and prints how many.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import tempfile

FORMAT_VERSION = 1
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet",
              ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow"}
SHOWN_SKIPS = 20  # skipped rows whose reason is printed; the rest are counted


class RowError(Exception):
    """A row that cannot become a prompt (the message says why)."""


class Fatal(Exception):
    """Nothing can be prepared (the message says why)."""


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="prepare_prompts.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="+", metavar="DATA",
                    help="JSONL, Parquet or Arrow files, or directories of them")
    ap.add_argument("--model", required=True, metavar="DIR",
                    help="the actor's model directory (tokenizer.json, tokenizer_config.json, chat template)")
    ap.add_argument("--out", required=True, metavar="FILE", help="the prompts file to write (JSONL)")
    ap.add_argument("--format", choices=["auto", "jsonl", "parquet", "arrow"], default="auto",
                    help="the input format (default: by file extension)")
    ap.add_argument("--messages-column", default="messages", metavar="NAME",
                    help="the column with chat messages (default: messages)")
    ap.add_argument("--prompt-column", default="prompt", metavar="NAME",
                    help="the column with a prompt string (default: prompt)")
    ap.add_argument("--answer-column", default="answer", metavar="NAME",
                    help="the column with the answer rewards grade against (default: answer); "
                         "a string, or a number (written as a string)")
    ap.add_argument("--require-answer", action="store_true",
                    help="a row without an answer is a bad row")
    ap.add_argument("--prompt-format", choices=["auto", "chat", "raw"], default="auto",
                    help="prompt-column rows: chat = one user message through the chat template, "
                         "raw = the string as it is; auto (default) = chat when the model has a template")
    ap.add_argument("--system-prompt", metavar="TEXT",
                    help="a system message put first in every templated chat that has none")
    ap.add_argument("--final-assistant", choices=["refuse", "drop"], default="refuse",
                    help="a chat that ends with an assistant message: a bad row (default), or drop "
                         "that message (kept as metadata.final_assistant)")
    ap.add_argument("--max-prompt-tokens", type=int, metavar="N",
                    help="a prompt of more tokens is a bad row (train also refuses prompts longer "
                         "than rollout.max_prompt_tokens)")
    ap.add_argument("--on-error", choices=["fail", "skip"], default="fail",
                    help="a bad row: stop (default) or leave it out and count it")
    ap.add_argument("--reward-model", metavar="DIR",
                    help="a reward model whose tokenizer is not the actor's: each row also carries the text "
                         "its chat template renders around the reply (reward_prefix, reward_suffix), which "
                         "train tokenizes each completion in with that model's tokenizer (docs/rewards.md)")
    args = ap.parse_args(argv)
    if args.max_prompt_tokens is not None and args.max_prompt_tokens < 1:
        ap.error(f"--max-prompt-tokens must be at least 1, not {args.max_prompt_tokens}")
    return args


# ---- the model: tokenizer, chat template and their identities --------------------------------

def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def python_text(path):
    with open(path, encoding="utf-8") as f:  # universal newlines, as transformers reads it
        return f.read()


def template_from_files(model_dir):
    """The chat template by the rules quartet's C++ side uses (model/tokenizer/chat_template.hpp):
    (text, source) or (None, None). Checked against transformers' own choice."""
    for name in ("chat_templates/default.jinja", "chat_template.jinja"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return python_text(path), path
    templates_dir = os.path.join(model_dir, "chat_templates")
    if os.path.isdir(templates_dir) and any(n.endswith(".jinja") for n in os.listdir(templates_dir)):
        return None, None
    config_path = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.isfile(config_path):
        return None, None
    with open(config_path, encoding="utf-8") as f:
        template = json.load(f).get("chat_template")
    if isinstance(template, str):
        return template, config_path
    if isinstance(template, list):
        for entry in template:
            if entry.get("name") == "default":
                return entry["template"], config_path
    return None, None


class Model:
    def __init__(self, model_dir, option="--model"):
        if not os.path.isdir(model_dir):
            raise Fatal(f"{option} {model_dir}: not a directory (give the model's local directory)")
        self.dir = os.path.abspath(model_dir)
        self.tokenizer_json = os.path.join(self.dir, "tokenizer.json")
        if not os.path.isfile(self.tokenizer_json):
            raise Fatal(f"{option} {model_dir}: no tokenizer.json (quartet reads a model's tokenizer.json; "
                        "for random: actors write the built-in one with `quartet tokenize random: --write-files DIR`)")
        with open(self.tokenizer_json, "rb") as f:
            self.tokenizer_sha256 = sha256_hex(f.read())
        import tokenizers
        import transformers
        from transformers import AutoTokenizer
        transformers.utils.logging.set_verbosity_error()
        self.versions = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
        try:
            self.tok = AutoTokenizer.from_pretrained(self.dir, local_files_only=True)
        except Exception as e:  # transformers' own message says what is missing
            raise Fatal(f"{option} {model_dir}: transformers cannot load its tokenizer: {e}") from e
        if not getattr(self.tok, "is_fast", False):
            raise Fatal(f"{option} {model_dir}: transformers loaded a slow tokenizer; quartet needs the "
                        "tokenizer.json one (the `tokenizers` library)")
        self.file_tokenizer = tokenizers.Tokenizer.from_file(self.tokenizer_json)
        self.transformers_differ = 0  # rows where transformers' own pipeline gives other ids
        self.template, self.template_source = template_from_files(self.dir)
        self.check_template(option)

    def check_template(self, option):
        """transformers' template must be the one quartet will find in the directory."""
        hf = self.tok.chat_template
        if isinstance(hf, dict):
            hf = hf.get("default")
        if hf != self.template:
            raise Fatal(f"{option} {self.dir}: the chat template transformers uses is not the one quartet "
                        f"finds ({self.template_source or 'none'}); docs/data.md says where quartet looks")
        self.template_sha256 = sha256_hex(self.template.encode("utf-8")) if self.template is not None else None

    def encode(self, text, add_special_tokens):
        ids = self.file_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        if ids != self.tok(text, add_special_tokens=add_special_tokens)["input_ids"]:
            self.transformers_differ += 1
        return ids

    def render(self, messages):
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # As apply_chat_template(tokenize=True) does: the template writes any BOS itself.
        return text, self.encode(text, add_special_tokens=False)

    def raw(self, text):
        return text, self.encode(text, add_special_tokens=True)


# ---- the reward model's rendering --------------------------------------------------------------

REPLY = "QUARTET-REPLY-5f0c"  # stands for the completion in the rendered conversation
# What a template may do to the reply's text that train does too (rl/rewards/reward_retokenizer.hpp):
# Jinja's trim is Python's str.strip(); Qwen3's templates lstrip newlines.
TRANSFORMS = {"none": lambda t: t, "strip": str.strip, "lstrip_newlines": lambda t: t.lstrip("\n")}
PROBES = [" \n a reply \t", "\n\na reply\n", "a reply"]


class RewardRenderer:
    """The text a reward model with a tokenizer of its own reads around each completion: its chat
    template renders the prompt's conversation plus an assistant reply (as prepare_pairs.py renders
    the pairs it is trained on), split where the reply goes; without a template, the raw prompt."""

    def __init__(self, model_dir):
        self.model = Model(model_dir, option="--reward-model")
        self.transform = "none"
        if self.model.template is not None:
            self.transform = self.find_transform()

    def split(self, messages, reply):
        whole = self.model.tok.apply_chat_template(messages + [{"role": "assistant", "content": reply}],
                                                   tokenize=False)
        if not isinstance(whole, str) or whole.count(REPLY) != 1:
            raise RowError("the reward model's chat template does not render the reply once, as it is")
        return whole.split(REPLY)

    def find_transform(self):
        """How the template changes a reply's text, from probes: one of TRANSFORMS, or a Fatal."""
        messages = [{"role": "user", "content": "a question"}]
        try:
            prefix, suffix = self.split(messages, REPLY)
            rendered = [self.model.tok.apply_chat_template(messages + [{"role": "assistant", "content": p}],
                                                           tokenize=False) for p in PROBES]
        except Exception as e:
            raise Fatal(f"--reward-model {self.model.dir}: its chat template cannot render a conversation with a "
                        f"reply: {e}") from e
        for name, f in TRANSFORMS.items():
            if all(r == prefix + f(p) + suffix for r, p in zip(rendered, PROBES)):
                return name
        raise Fatal(f"--reward-model {self.model.dir}: its chat template ({self.model.template_source}) changes a "
                    "reply's text in a way quartet does not reproduce (it keeps the reply as it is, strips it, or "
                    "strips its leading newlines)")

    def row(self, messages, raw_prompt):
        """(reward_prefix, reward_suffix) of a row: its chat (or its raw prompt as one user message)."""
        if self.model.template is None:
            if raw_prompt is None:
                raise RowError(f"the reward model ({self.model.dir}) has no chat template to render the chat with")
            return raw_prompt, ""
        chat = messages if messages is not None else [{"role": "user", "content": raw_prompt}]
        try:
            prefix, suffix = self.split(chat, REPLY)
        except RowError:
            raise
        except Exception as e:  # the template's own error (a role it refuses, say)
            raise RowError(f"the reward model's chat template refuses it: {e}") from e
        return prefix, suffix

    def header(self):
        m = self.model
        return {"tokenizer": {"sha256": m.tokenizer_sha256, "source": m.tokenizer_json},
                "chat_template": None if m.template is None else {"sha256": m.template_sha256,
                                                                  "source": m.template_source},
                "completion_transform": self.transform}


# ---- reading the data -------------------------------------------------------------------------

def input_files(paths, forced):
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(root, n) for n in sorted(names)
                          if os.path.splitext(n)[1].lower() in EXTENSIONS]
            if not found:
                raise Fatal(f"{path}: a directory without .jsonl, .parquet or .arrow files")
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise Fatal(f"{path}: no such file or directory")
    out = []
    for f in files:
        kind = forced if forced != "auto" else EXTENSIONS.get(os.path.splitext(f)[1].lower())
        if kind is None:
            raise Fatal(f"{f}: cannot tell the format from the name (.jsonl, .parquet, .arrow): give --format")
        out.append((f, kind))
    return out


def jsonl_rows(path):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield where, RowError(f"not JSON ({e})")
                continue
            yield where, row if isinstance(row, dict) else RowError(f"a JSON {type(row).__name__}, not an object")


def table_rows(path, batches):
    n = 0
    for batch in batches:
        for row in batch.to_pylist():
            yield f"{path}: row {n}", row
            n += 1


def parquet_rows(path):
    import pyarrow.parquet as pq
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
    except Exception as e:
        raise Fatal(f"{path}: not a readable Parquet file ({e})") from e
    yield from table_rows(path, batches)


def arrow_rows(path):
    import pyarrow as pa
    try:
        reader = pa.ipc.open_file(path)  # the Arrow file format (Feather v2)
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        try:
            batches = pa.ipc.open_stream(path)  # the stream format (`datasets` writes it)
        except Exception as e:
            raise Fatal(f"{path}: not an Arrow file or stream ({e})") from e
    yield from table_rows(path, batches)


READERS = {"jsonl": jsonl_rows, "parquet": parquet_rows, "arrow": arrow_rows}


# ---- one row ----------------------------------------------------------------------------------

def jsonable(v):
    """A value JSON can hold (and C++ can read back: no NaN); dates and the like as text."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    return str(v)


def a_type(v):
    name = type(v).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def check_messages(messages, column):
    if not isinstance(messages, list):
        raise RowError(f"'{column}' is {a_type(messages)}, not a list of messages")
    if not messages:
        raise RowError(f"'{column}' is an empty chat")
    for k, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RowError(f"'{column}'[{k}] is {a_type(m)}, not a message {{role, content}}")
        if not isinstance(m.get("role"), str) or not m["role"]:
            raise RowError(f"'{column}'[{k}] has no 'role' string")
        if not isinstance(m.get("content"), (str, list)):
            raise RowError(f"'{column}'[{k}] has no 'content' (a string, or a list of parts)")


class Preparer:
    def __init__(self, args, model):
        self.args, self.model = args, model
        fmt = args.prompt_format
        self.prompt_format = fmt if fmt != "auto" else ("chat" if model.template is not None else "raw")
        if self.prompt_format == "chat" and model.template is None:
            raise Fatal(f"--prompt-format chat: {model.dir} has no chat template "
                        "(tokenizer_config.json chat_template, or chat_template.jinja)")
        self.templated = 0  # rows rendered through the chat template
        self.reward = RewardRenderer(args.reward_model) if args.reward_model else None

    def chat(self, messages, metadata):
        column = self.args.messages_column
        check_messages(messages, column)
        messages = [dict(m) for m in messages]
        if self.args.system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.args.system_prompt})
        if messages[-1]["role"] == "assistant":
            if self.args.final_assistant == "refuse":
                raise RowError(f"'{column}' ends with an assistant message: the prompt would hold its reply "
                               "(--final-assistant drop leaves it out)")
            metadata["final_assistant"] = jsonable(messages.pop()["content"])
            if not messages or all(m["role"] == "system" for m in messages):
                raise RowError(f"'{column}' holds nothing before its final assistant message")
        if self.model.template is None:
            raise RowError(f"a chat needs a chat template, and {self.model.dir} has none")
        try:
            text, ids = self.model.render(messages)
        except Exception as e:  # the template's own error (a role it refuses, say)
            raise RowError(f"the chat template refuses it: {e}") from e
        return text, ids, messages

    def answer(self, row):
        col = self.args.answer_column
        a = row.get(col)
        if a is None:
            if self.args.require_answer:
                raise RowError(f"no '{col}' (--require-answer)")
            return None
        if isinstance(a, bool) or not isinstance(a, (str, int, float)):
            raise RowError(f"'{col}' is {a_type(a)}, not a string or a number")
        return a if isinstance(a, str) else str(a)

    def row(self, row, where):
        a = self.args
        metadata = {k: jsonable(v) for k, v in row.items()
                    if k not in (a.messages_column, a.prompt_column, a.answer_column)}
        answer = self.answer(row)
        messages = raw_prompt = None
        if row.get(a.messages_column) is not None:
            text, ids, messages = self.chat(row[a.messages_column], metadata)
        elif row.get(a.prompt_column) is not None:
            prompt = row[a.prompt_column]
            if not isinstance(prompt, str):
                raise RowError(f"'{a.prompt_column}' is {a_type(prompt)}, not a string")
            if not prompt:
                raise RowError(f"'{a.prompt_column}' is empty")
            raw_prompt = prompt
            if self.prompt_format == "chat":
                text, ids, messages = self.chat([{"role": "user", "content": prompt}], metadata)
            else:
                text, ids = self.model.raw(prompt)
        else:
            raise RowError(f"neither '{a.messages_column}' nor '{a.prompt_column}' (columns: {', '.join(row) or 'none'})")
        if not ids:
            raise RowError("the prompt tokenizes to no tokens")
        if a.max_prompt_tokens is not None and len(ids) > a.max_prompt_tokens:
            raise RowError(f"the prompt has {len(ids)} tokens, more than --max-prompt-tokens {a.max_prompt_tokens}")
        out = {"prompt": text, "prompt_ids": ids}
        if answer is not None:
            out["answer"] = answer
        if messages is not None:
            out["messages"] = jsonable(messages)
        if self.reward is not None:
            out["reward_prefix"], out["reward_suffix"] = self.reward.row(messages, raw_prompt)
        out["metadata"] = metadata
        out["origin"] = where
        self.templated += messages is not None
        return out


# ---- the file ---------------------------------------------------------------------------------

def header(args, model, prep, sources, written, skipped):
    h = {
        "quartet_prompts": FORMAT_VERSION,
        "tokenizer": {"sha256": model.tokenizer_sha256, "source": model.tokenizer_json,
                      "vocab_size": len(model.tok)},
        "chat_template": {"applied": prep.templated > 0, "sha256": model.template_sha256,
                          "source": model.template_source},
        "source": sources,
        "rows": written,
        "skipped": skipped,
        "options": {"prompt_format": prep.prompt_format, "system_prompt": args.system_prompt,
                    "messages_column": args.messages_column, "prompt_column": args.prompt_column,
                    "answer_column": args.answer_column, "require_answer": args.require_answer,
                    "final_assistant": args.final_assistant, "max_prompt_tokens": args.max_prompt_tokens,
                    "on_error": args.on_error, "reward_model": args.reward_model},
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "program": "quartet inputs/prepare/prepare_prompts.py",
        "versions": model.versions,
    }
    if prep.reward is not None:
        h["reward_model"] = prep.reward.header()
    return h


def write_prepared(out_path, files, prepare_row, make_header, on_error, program):
    """Every row of `files` through prepare_row(row, where) -> dict, written to out_path after
    the header make_header(sources, written, skipped) (a dict), all at once when every file is
    read: a failed preparation writes nothing. A RowError is fatal (on_error "fail") or counted
    (skip). Returns (written, skipped)."""
    out_dir = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(out_dir, exist_ok=True)
    sources, written, skipped = [], 0, 0
    with tempfile.TemporaryFile("w+", encoding="utf-8", dir=out_dir) as rows:
        for path, kind in files:
            read = ok = 0
            for where, row in READERS[kind](path):
                read += 1
                try:
                    if isinstance(row, RowError):
                        raise row
                    prepared = prepare_row(row, where)
                    rows.write(json.dumps(prepared, ensure_ascii=False, allow_nan=False) + "\n")
                    ok += 1
                except RowError as e:
                    if on_error == "fail":
                        raise Fatal(f"{where}: {e} (--on-error skip leaves such rows out)") from None
                    if skipped < SHOWN_SKIPS:
                        print(f"{program}: skipped {where}: {e}", file=sys.stderr)
                    skipped += 1
            sources.append({"path": os.path.abspath(path), "format": kind, "rows": read, "prepared": ok})
            written += ok
        if written == 0:
            raise Fatal(f"no row could be prepared ({skipped} skipped)")
        tmp = out_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps(make_header(sources, written, skipped), ensure_ascii=False) + "\n")
            rows.seek(0)
            for line in rows:
                out.write(line)
        os.replace(tmp, out_path)
    if skipped > SHOWN_SKIPS:
        print(f"{program}: ... and {skipped - SHOWN_SKIPS} more", file=sys.stderr)
    if skipped:
        print(f"{program}: skipped {skipped} of {written + skipped} rows (--on-error skip)")
    return written, skipped


def note_transformers_differ(model, program):
    if model.transformers_differ:
        print(f"{program}: note: for {model.transformers_differ} row(s), transformers' tokenizer "
              f"({type(model.tok).__name__}) gives other ids than {model.tokenizer_json} run by `tokenizers`; "
              "the file holds the latter, which quartet computes from text too (docs/data.md)")


def prepare(args):
    model = Model(args.model)
    prep = Preparer(args, model)
    files = input_files(args.data, args.format)
    written, _ = write_prepared(args.out, files, prep.row,
                                lambda sources, written, skipped: header(args, model, prep, sources, written, skipped),
                                args.on_error, "prepare_prompts")
    note_transformers_differ(model, "prepare_prompts")
    print(f"prepare_prompts: {written} prompts ({prep.templated} rendered through the chat template) "
          f"from {len(files)} file(s) -> {args.out}")


def run_offline(prepare, args, program):
    """prepare(args) offline (set before transformers is imported: nothing is fetched, whatever the
    environment says); a Fatal error printed as `program: error: ...`. The exit status."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        prepare(args)
    except Fatal as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    return run_offline(prepare, parse_args(argv), "prepare_prompts")


if __name__ == "__main__":
    sys.exit(main())
