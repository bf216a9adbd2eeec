#include "quartet/core/rm_config.hpp"

#include <boost/program_options/options_description.hpp>

#include <cmath>

#include "quartet/core/deck.hpp"
#include "quartet/core/files.hpp"

namespace po = boost::program_options;

namespace quartet {

po::options_description rm_schema() {
  const RmConfig r;
  po::options_description d("Reward-model training (quartet rm)");
  d.add_options()
    ("rm.data", po::value<std::string>()->default_value(""), "training pair files, comma-separated, read as one dataset: plain JSONL {\"prompt\", \"chosen\", \"rejected\", optional \"margin\"} (tokenized with the reward model's tokenizer, each response followed by EOS), or files inputs/prepare/prepare_pairs.py wrote for the reward model (docs/rm.md, docs/data.md \"Pair files\")")
    ("rm.heldout", po::value<std::string>()->default_value(""), "held-out pairs file, in either format: pairwise accuracy, loss and mean rewards every rm.eval_every steps (\"\" = no evaluation)")
    ("rm.epochs", po::value<double>()->default_value(r.epochs), "passes over the pairs (> 0; may be fractional), when rm.steps is 0")
    ("rm.steps", po::value<int>()->default_value(r.steps), "optimizer steps of the run (>= 0; 0 = ceil(epochs x pairs / (batch x ranks)); when > 0, rm.epochs is not read)")
    ("rm.batch", po::value<int>()->default_value(r.batch), "pairs per optimizer step and rank (>= 1), in micro-batches of train.micro_batch pairs; the loss is the mean over the step's pairs on every rank")
    ("rm.max_tokens", po::value<int>()->default_value(r.max_tokens), "longest side of a pair, the prompt and one response, in tokens (>= 2); a longer pair is refused, naming its file and line")
    ("rm.margin", po::value<bool>()->default_value(r.margin), "the Bradley-Terry loss subtracts each row's \"margin\" (-log sigmoid(r_chosen - r_rejected - margin); rows without one: 0); false: margins are ignored")
    ("rm.eval_every", po::value<int>()->default_value(r.eval_every), "held-out evaluation every N steps (>= 0; 0 = only at the end)")
    ("rm.eval_at_start", po::value<bool>()->default_value(r.eval_at_start), "also evaluate before the first step")
    ("rm.eval_at_end", po::value<bool>()->default_value(r.eval_at_end), "evaluate after the last step")
    ("rm.eval_count", po::value<int>()->default_value(r.eval_count), "held-out pairs evaluated: the first N (0 = all), shared out over the ranks")
    ("rm.log_every", po::value<int>()->default_value(r.log_every), "a log line every N steps (>= 1; run.h5 records every step)");
  return d;
}

namespace {

void check_file(const Deck& deck, const std::string& key, const std::string& path) {
  if (!is_regular_file(path)) deck.fail(key, "names '" + path + "', which is not a readable file");
}

// The held-out keys are refused without a held-out file (as sft's are): set away from its
// default, a key means evaluation was wanted; defaults spelled out, as a resolved deck spells them, are fine.
void refuse_eval_keys_without_heldout(const Deck& deck) {
  const RmConfig d;
  const std::pair<const char*, bool> changed[] = {
      {"rm.eval_every", deck.get<int>("rm.eval_every") != d.eval_every},
      {"rm.eval_at_start", deck.get<bool>("rm.eval_at_start") != d.eval_at_start},
      {"rm.eval_at_end", deck.get<bool>("rm.eval_at_end") != d.eval_at_end},
      {"rm.eval_count", deck.get<int>("rm.eval_count") != d.eval_count}};
  for (const auto& [key, differs] : changed)
    if (differs) deck.fail(key, "is set, but rm.heldout is not: name the held-out pairs to evaluate on");
}

}  // namespace

RmConfig load_rm_config(const Deck& deck) {
  RmConfig r;
  r.data = split_list(deck.get<std::string>("rm.data"));
  for (const std::string& f : r.data) check_file(deck, "rm.data", f);
  r.heldout = deck.get<std::string>("rm.heldout");
  if (!r.heldout.empty()) check_file(deck, "rm.heldout", r.heldout);
  else refuse_eval_keys_without_heldout(deck);
  r.epochs = deck.get<double>("rm.epochs");
  if (!(r.epochs > 0 && std::isfinite(r.epochs))) deck.fail("rm.epochs", "must be a number > 0");
  const std::pair<const char*, int*> counts[] = {
      {"rm.steps", &r.steps}, {"rm.eval_every", &r.eval_every}, {"rm.eval_count", &r.eval_count}};
  for (const auto& [key, value] : counts) {
    *value = deck.get<int>(key);
    if (*value < 0) deck.fail(key, "must be >= 0");
  }
  const std::pair<const char*, int*> positive[] = {{"rm.batch", &r.batch}, {"rm.log_every", &r.log_every}};
  for (const auto& [key, value] : positive) {
    *value = deck.get<int>(key);
    if (*value < 1) deck.fail(key, "must be at least 1");
  }
  r.max_tokens = deck.get<int>("rm.max_tokens");
  if (r.max_tokens < 2) deck.fail("rm.max_tokens", "must be at least 2 (a prompt token and a response token)");
  r.margin = deck.get<bool>("rm.margin");
  r.eval_at_start = deck.get<bool>("rm.eval_at_start");
  r.eval_at_end = deck.get<bool>("rm.eval_at_end");
  if (!r.heldout.empty() && r.eval_every == 0 && !r.eval_at_end && !r.eval_at_start)
    deck.fail("rm.eval_at_end", "is false, and rm.eval_every is 0 and rm.eval_at_start false: the run would never "
                                "evaluate on rm.heldout");
  return r;
}

}  // namespace quartet
