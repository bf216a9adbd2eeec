#include "quartet/tune/stage_deck.hpp"

namespace quartet {

void check_stage_deck_keys(const Config& cfg, const std::string& command, bool data_set,
                           const std::string& data_what) {
  if (!data_set)
    cfg.deck.fail(command + ".data", "is not set: name " + data_what + " to train on (docs/" + command + ".md)");
  refuse_other_stages(cfg, command);
  if (cfg.run.iterations != RunConfig{}.iterations)
    cfg.deck.fail("run.iterations", "is set, but quartet " + command + " counts steps: give " + command + ".steps or " +
                                        command + ".epochs instead");
}

}  // namespace quartet
