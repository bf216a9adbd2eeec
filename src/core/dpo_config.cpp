#include "quartet/core/dpo_config.hpp"

#include <boost/program_options/options_description.hpp>

#include <cmath>
#include <utility>

#include "quartet/core/deck.hpp"
#include "quartet/core/files.hpp"

namespace po = boost::program_options;

namespace quartet {

po::options_description dpo_schema() {
  const DpoConfig s;
  po::options_description d("Direct Preference Optimisation (quartet dpo)");
  d.add_options()
    ("dpo.data", po::value<std::string>()->default_value(""), "training pairs: a plain pairs file ({\"prompt\", \"chosen\", \"rejected\"} a line, tokenized with the actor's tokenizer) or one inputs/prepare/prepare_pairs.py wrote for the actor (docs/data.md, \"Pair files\")")
    ("dpo.heldout", po::value<std::string>()->default_value(""), "held-out pairs file, either kind: its DPO loss, reward accuracy, rewards and log-probs are measured every dpo.eval_every steps (\"\" = no evaluation)")
    ("dpo.epochs", po::value<double>()->default_value(s.epochs), "passes over the pairs (> 0; may be fractional), when dpo.steps is 0")
    ("dpo.steps", po::value<int>()->default_value(s.steps), "optimizer steps of the run (>= 0; 0 = ceil(epochs x pairs / (batch x actor ranks)); when > 0, dpo.epochs is not read)")
    ("dpo.batch", po::value<int>()->default_value(s.batch), "pairs per optimizer step and actor rank (>= 1); the loss is the mean over the step's pairs on every rank; micro-batches of train.micro_batch pairs (both sides in one pass)")
    ("dpo.max_tokens", po::value<int>()->default_value(s.max_tokens), "longest side of a pair, the prompt and one response, in tokens (>= 2); a longer pair is refused, naming its file and line")
    ("dpo.loss", po::value<std::string>()->default_value(s.loss), "sigmoid (DPO: -log sigmoid(beta h), sequence log-probs summed) | ipo (IPO: (h - 1/(2 beta))^2, sequence log-probs averaged over the response, as TRL)")
    ("dpo.beta", po::value<double>()->default_value(s.beta), "beta, the strength of the implicit KL penalty towards the reference (> 0)")
    ("dpo.label_smoothing", po::value<double>()->default_value(s.label_smoothing), "epsilon of conservative DPO (cDPO): the share of pairs assumed mislabelled, in [0, 0.5); sigmoid only")
    ("dpo.eval_every", po::value<int>()->default_value(s.eval_every), "held-out evaluation every N steps (>= 0; 0 = only at the end)")
    ("dpo.eval_at_start", po::value<bool>()->default_value(s.eval_at_start), "also evaluate before the first step")
    ("dpo.eval_at_end", po::value<bool>()->default_value(s.eval_at_end), "evaluate after the last step")
    ("dpo.eval_count", po::value<int>()->default_value(s.eval_count), "held-out pairs evaluated: the first N (0 = all), shared out over the actor ranks")
    ("dpo.log_every", po::value<int>()->default_value(s.log_every), "a log line every N steps (>= 1; run.h5 records every step)");
  return d;
}

namespace {

void check_file(const Deck& deck, const std::string& key, const std::string& path) {
  if (!is_regular_file(path)) deck.fail(key, "names '" + path + "', which is not a readable file");
}

// As sft's: a held-out key set away from its default means evaluation was wanted.
void refuse_eval_keys_without_heldout(const Deck& deck) {
  const DpoConfig d;
  const std::pair<const char*, bool> changed[] = {
      {"dpo.eval_every", deck.get<int>("dpo.eval_every") != d.eval_every},
      {"dpo.eval_at_start", deck.get<bool>("dpo.eval_at_start") != d.eval_at_start},
      {"dpo.eval_at_end", deck.get<bool>("dpo.eval_at_end") != d.eval_at_end},
      {"dpo.eval_count", deck.get<int>("dpo.eval_count") != d.eval_count}};
  for (const auto& [key, differs] : changed)
    if (differs) deck.fail(key, "is set, but dpo.heldout is not: name the held-out pairs to evaluate on");
}

void load_loss(const Deck& deck, DpoConfig& s) {
  s.loss = deck.get<std::string>("dpo.loss");
  if (s.loss != "sigmoid" && s.loss != "ipo")
    deck.fail("dpo.loss", "is '" + s.loss + "': expected sigmoid (DPO; cDPO with dpo.label_smoothing > 0) or ipo");
  s.beta = deck.get<double>("dpo.beta");
  if (!(s.beta > 0 && std::isfinite(s.beta))) deck.fail("dpo.beta", "must be a number > 0");
  s.label_smoothing = deck.get<double>("dpo.label_smoothing");
  if (!(s.label_smoothing >= 0 && s.label_smoothing < 0.5))
    deck.fail("dpo.label_smoothing", "must lie in [0, 0.5): the share of pairs assumed mislabelled");
  if (s.label_smoothing > 0 && s.loss == "ipo")
    deck.fail("dpo.label_smoothing", "is > 0, but dpo.loss is ipo: label smoothing (conservative DPO) applies to the "
                                     "sigmoid loss only");
}

}  // namespace

DpoConfig load_dpo_config(const Deck& deck) {
  DpoConfig s;
  s.data = deck.get<std::string>("dpo.data");
  if (!s.data.empty()) check_file(deck, "dpo.data", s.data);
  s.heldout = deck.get<std::string>("dpo.heldout");
  if (!s.heldout.empty()) check_file(deck, "dpo.heldout", s.heldout);
  else refuse_eval_keys_without_heldout(deck);
  s.epochs = deck.get<double>("dpo.epochs");
  if (!(s.epochs > 0 && std::isfinite(s.epochs))) deck.fail("dpo.epochs", "must be a number > 0");
  const std::pair<const char*, int*> counts[] = {
      {"dpo.steps", &s.steps}, {"dpo.eval_every", &s.eval_every}, {"dpo.eval_count", &s.eval_count}};
  for (const auto& [key, value] : counts) {
    *value = deck.get<int>(key);
    if (*value < 0) deck.fail(key, "must be >= 0");
  }
  const std::pair<const char*, int*> positive[] = {{"dpo.batch", &s.batch}, {"dpo.log_every", &s.log_every}};
  for (const auto& [key, value] : positive) {
    *value = deck.get<int>(key);
    if (*value < 1) deck.fail(key, "must be at least 1");
  }
  s.max_tokens = deck.get<int>("dpo.max_tokens");
  if (s.max_tokens < 2) deck.fail("dpo.max_tokens", "must be at least 2 (a prompt token and a response token)");
  load_loss(deck, s);
  s.eval_at_start = deck.get<bool>("dpo.eval_at_start");
  s.eval_at_end = deck.get<bool>("dpo.eval_at_end");
  if (!s.heldout.empty() && s.eval_every == 0 && !s.eval_at_end && !s.eval_at_start)
    deck.fail("dpo.eval_at_end", "is false, and dpo.eval_every is 0 and dpo.eval_at_start false: the run would never "
                                 "evaluate on dpo.heldout");
  return s;
}

}  // namespace quartet
