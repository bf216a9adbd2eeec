#include "quartet/core/sft_config.hpp"

#include <boost/program_options/options_description.hpp>

#include <cmath>

#include "quartet/core/deck.hpp"
#include "quartet/core/files.hpp"

namespace po = boost::program_options;

namespace quartet {

po::options_description sft_schema() {
  const SftConfig s;
  po::options_description d("Supervised fine-tuning (quartet sft)");
  d.add_options()
    ("sft.data", po::value<std::string>()->default_value(""), "training files, comma-separated, read as one dataset: plain JSONL with the prompt and response text (sft.prompt_field, sft.response_field; the built-in or the actor's tokenizer, the response followed by EOS), or files inputs/prepare/prepare_sft.py wrote for the actor (prompt/response pairs or chat messages through its chat template; docs/sft.md)")
    ("sft.heldout", po::value<std::string>()->default_value(""), "held-out file, in either format: its loss, token accuracy and greedy exact match are measured every sft.eval_every steps (\"\" = no evaluation)")
    ("sft.prompt_field", po::value<std::string>()->default_value(s.prompt_field), "plain JSONL: the field with the prompt text")
    ("sft.response_field", po::value<std::string>()->default_value(s.response_field), "plain JSONL: the field with the response text (answer reads the prompt files of train)")
    ("sft.epochs", po::value<double>()->default_value(s.epochs), "passes over the data (> 0; may be fractional), when sft.steps is 0")
    ("sft.steps", po::value<int>()->default_value(s.steps), "optimizer steps of the run (>= 0; 0 = ceil(epochs x rows / (batch x ranks)); when > 0, sft.epochs is not read)")
    ("sft.batch", po::value<int>()->default_value(s.batch), "sequences per optimizer step and rank (>= 1); the loss is the mean over the step's target tokens on every rank")
    ("sft.micro_batch_tokens", po::value<int>()->default_value(s.micro_batch_tokens), "micro-batches of the step's sequences, sorted by length, holding at most this many padded tokens (0 = train.micro_batch sequences each; else >= sft.max_tokens)")
    ("sft.max_tokens", po::value<int>()->default_value(s.max_tokens), "longest sequence, prompt and response, in tokens (>= 2); a longer row is refused, naming its file and line")
    ("sft.loss_on_prompt", po::value<bool>()->default_value(s.loss_on_prompt), "the loss counts the prompt's tokens too (false: the response's alone, as OpenRLHF and TRL do by default)")
    ("sft.eval_every", po::value<int>()->default_value(s.eval_every), "held-out evaluation every N steps (>= 0; 0 = only at the end)")
    ("sft.eval_at_start", po::value<bool>()->default_value(s.eval_at_start), "also evaluate before the first step")
    ("sft.eval_at_end", po::value<bool>()->default_value(s.eval_at_end), "evaluate after the last step")
    ("sft.eval_count", po::value<int>()->default_value(s.eval_count), "held-out rows evaluated: the first N (0 = all), shared out over the ranks")
    ("sft.exact_match", po::value<bool>()->default_value(s.exact_match), "held-out: also generate each prompt's greedy completion and count those equal to the response, token for token up to its stop token")
    ("sft.log_every", po::value<int>()->default_value(s.log_every), "a log line every N steps (>= 1; run.h5 records every step)");
  return d;
}

namespace {

void check_file(const Deck& deck, const std::string& key, const std::string& path) {
  if (!is_regular_file(path)) deck.fail(key, "names '" + path + "', which is not a readable file");
}

// The held-out keys are refused without a held-out file, as [eval]'s are without eval.prompts: a
// key set away from its default means evaluation was wanted (defaults spelled out, as a resolved
// deck spells them, are fine).
void refuse_eval_keys_without_heldout(const Deck& deck) {
  const SftConfig d;
  const std::pair<const char*, bool> changed[] = {
      {"sft.eval_every", deck.get<int>("sft.eval_every") != d.eval_every},
      {"sft.eval_at_start", deck.get<bool>("sft.eval_at_start") != d.eval_at_start},
      {"sft.eval_at_end", deck.get<bool>("sft.eval_at_end") != d.eval_at_end},
      {"sft.eval_count", deck.get<int>("sft.eval_count") != d.eval_count},
      {"sft.exact_match", deck.get<bool>("sft.exact_match") != d.exact_match}};
  for (const auto& [key, differs] : changed)
    if (differs) deck.fail(key, "is set, but sft.heldout is not: name the held-out file to evaluate on");
}

}  // namespace

SftConfig load_sft_config(const Deck& deck) {
  SftConfig s;
  s.data = split_list(deck.get<std::string>("sft.data"));
  for (const std::string& f : s.data) check_file(deck, "sft.data", f);
  s.heldout = deck.get<std::string>("sft.heldout");
  if (!s.heldout.empty()) check_file(deck, "sft.heldout", s.heldout);
  else refuse_eval_keys_without_heldout(deck);
  s.prompt_field = deck.get<std::string>("sft.prompt_field");
  s.response_field = deck.get<std::string>("sft.response_field");
  for (const char* key : {"sft.prompt_field", "sft.response_field"})
    if (deck.get<std::string>(key).empty()) deck.fail(key, "must not be empty");
  if (s.prompt_field == s.response_field)
    deck.fail("sft.response_field", "is '" + s.response_field + "', the same field as sft.prompt_field");
  s.epochs = deck.get<double>("sft.epochs");
  if (!(s.epochs > 0 && std::isfinite(s.epochs))) deck.fail("sft.epochs", "must be a number > 0");
  const std::pair<const char*, int*> counts[] = {{"sft.steps", &s.steps},
                                                 {"sft.micro_batch_tokens", &s.micro_batch_tokens},
                                                 {"sft.eval_every", &s.eval_every},
                                                 {"sft.eval_count", &s.eval_count}};
  for (const auto& [key, value] : counts) {
    *value = deck.get<int>(key);
    if (*value < 0) deck.fail(key, "must be >= 0");
  }
  const std::pair<const char*, int*> positive[] = {{"sft.batch", &s.batch}, {"sft.log_every", &s.log_every}};
  for (const auto& [key, value] : positive) {
    *value = deck.get<int>(key);
    if (*value < 1) deck.fail(key, "must be at least 1");
  }
  s.max_tokens = deck.get<int>("sft.max_tokens");
  if (s.max_tokens < 2) deck.fail("sft.max_tokens", "must be at least 2 (a prompt token and a response token)");
  if (s.micro_batch_tokens > 0 && s.micro_batch_tokens < s.max_tokens)
    deck.fail("sft.micro_batch_tokens", "is " + std::to_string(s.micro_batch_tokens) +
                                            ", less than sft.max_tokens = " + std::to_string(s.max_tokens) +
                                            ": the longest sequence would fit no micro-batch");
  s.loss_on_prompt = deck.get<bool>("sft.loss_on_prompt");
  s.eval_at_start = deck.get<bool>("sft.eval_at_start");
  s.eval_at_end = deck.get<bool>("sft.eval_at_end");
  s.exact_match = deck.get<bool>("sft.exact_match");
  if (!s.heldout.empty() && s.eval_every == 0 && !s.eval_at_end && !s.eval_at_start)
    deck.fail("sft.eval_at_end", "is false, and sft.eval_every is 0 and sft.eval_at_start false: the run would never "
                                 "evaluate on sft.heldout");
  return s;
}

}  // namespace quartet
