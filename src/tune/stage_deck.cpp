#include "quartet/tune/stage_deck.hpp"

#include "quartet/core/run_config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

void check_stage_deck_keys(const Config& cfg, const std::string& command, bool data_set,
                           const std::string& data_what) {
  if (!data_set)
    cfg.deck.fail(command + ".data", "is not set: name " + data_what + " to train on (docs/" + command + ".md)");
  refuse_other_stages(cfg, command);
  // Packing is quartet train's: a stage trains padded micro-batches of train.micro_batch rows.
  if (cfg.get<TrainConfig>().micro_batch_tokens != TrainConfig{}.micro_batch_tokens)
    cfg.deck.fail("train.micro_batch_tokens", "is set, but quartet " + command +
                                                  " does not pack its micro-batches: give train.micro_batch sequences");
  if (cfg.get<RolloutConfig>().score_tokens != RolloutConfig{}.score_tokens)
    cfg.deck.fail("rollout.score_tokens", "is set, but quartet " + command + " does not pack its scoring passes");
  if (cfg.get<RunConfig>().iterations != RunConfig{}.iterations)
    cfg.deck.fail("run.iterations", "is set, but quartet " + command + " counts steps: give " + command + ".steps or " +
                                        command + ".epochs instead");
}

}  // namespace quartet
