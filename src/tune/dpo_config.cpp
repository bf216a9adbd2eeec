#include "quartet/tune/dpo_config.hpp"

#include <cmath>

namespace quartet {

namespace {

using D = DpoConfig;

void check_dpo(const Deck& deck, D& d) {
  check_stage_keys(deck, "dpo", d.stage);
  if (d.label_smoothing > 0 && d.loss == "ipo")
    deck.fail("dpo.label_smoothing", "is > 0, but dpo.loss is ipo: label smoothing (conservative DPO) applies to the "
                                     "sigmoid loss only");
}

const Check<std::string> kLoss = [](const std::string& l) {
  return l == "sigmoid" || l == "ipo" ? "" : "is '" + l + "': expected sigmoid (DPO; cDPO with dpo.label_smoothing > 0) or ipo";
};

}  // namespace

const Section<DpoConfig>& dpo_section() {
  static const Section<D> section("dpo", "Direct Preference Optimisation (quartet dpo)", joined<D>({
      {key("data", &D::data, readable_file_or_empty("names"), "training pairs: a plain pairs file ({\"prompt\", \"chosen\", \"rejected\"} a line, tokenized with the actor's tokenizer) or one inputs/prepare/prepare_pairs.py wrote for the actor (docs/data.md, \"Pair files\")")},
      nested("", &D::stage, stage_rows({
          "held-out pairs file, either kind: its DPO loss, reward accuracy, rewards and log-probs are measured every dpo.eval_every steps (\"\" = no evaluation)",
          "passes over the pairs (> 0; may be fractional), when dpo.steps is 0",
          "optimizer steps of the run (>= 0; 0 = ceil(epochs x pairs / (batch x actor ranks)); when > 0, dpo.epochs is not read)",
          "pairs per optimizer step and actor rank (>= 1); the loss is the mean over the step's pairs on every rank; micro-batches of train.micro_batch pairs (both sides in one pass)",
          "longest side of a pair, the prompt and one response, in tokens (>= 2); a longer pair is refused, naming its file and line",
          "held-out pairs evaluated: the first N (0 = all), shared out over the actor ranks"})),
      {key("loss", &D::loss, kLoss, "sigmoid (DPO: -log sigmoid(beta h), sequence log-probs summed) | ipo (IPO: (h - 1/(2 beta))^2, sequence log-probs averaged over the response, as TRL)"),
       key("beta", &D::beta, Check<double>([](const double& b) { return b > 0 && std::isfinite(b) ? "" : "must be a number > 0"; }), "beta, the strength of the implicit KL penalty towards the reference (> 0)"),
       key("label_smoothing", &D::label_smoothing, Check<double>([](const double& e) { return e >= 0 && e < 0.5 ? "" : "must lie in [0, 0.5): the share of pairs assumed mislabelled"; }), "epsilon of conservative DPO (cDPO): the share of pairs assumed mislabelled, in [0, 0.5); sigmoid only")},
  }), check_dpo);
  return section;
}

}  // namespace quartet
