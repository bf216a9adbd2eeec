#pragma once
// Typed configuration, one struct per deck section. Nothing under src/ reads the deck except
// through these. Each section's keys, defaults and units are declared once, in config.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

#include "quartet/core/deck.hpp"

namespace quartet {

struct RunConfig {              // [run]
  std::string name = "quartet"; // run name, shown in logs and the run file
  std::string out = "runs/quartet";  // output directory
  std::uint64_t seed = 1;       // base random seed
  int iterations = 1;           // iterations of the command's main loop
};

struct PlacementConfig {        // [placement]
  std::string mode = "disjoint";  // disjoint | colocated
  // Ranks per role. -1 = not given: 0 in disjoint mode, every rank in colocated mode.
  int actor = -1, critic = -1, reference = -1, reward = -1;
};

struct DistConfig {             // [dist]
  std::string backend = "auto";   // auto | nccl | mpi
  std::string device = "auto";    // auto | cuda | cpu
  double watchdog_timeout = 600;  // seconds a collective or exchange may take before abort
};

struct ModelSectionConfig {     // [model.actor], [model.critic], [model.reference], [model.reward]
  std::string path;             // a Hugging Face model directory ("" = not set)
  std::string dtype = "float32";  // float32 | bfloat16 | float16
};

struct RolloutConfig {          // [rollout]
  std::string prompts;          // JSONL file, one {"prompt": "..."} per line
  int batch = 8;                // prompts per generation batch and rank
  int max_new_tokens = 16;
  double temperature = 1.0;     // 0 = greedy
  int top_k = 0;                // 0 = off
  double top_p = 1.0;           // 1 = off
  std::vector<std::string> stop;  // stop tokens (token strings); the tokenizer's EOS always stops
};

struct Config {
  Deck deck;  // the parsed deck, for error messages naming key and line
  RunConfig run;
  PlacementConfig placement;
  DistConfig dist;
  ModelSectionConfig actor, critic, reference, reward;
  RolloutConfig rollout;
};

// Every key a deck may hold, with defaults, units and help.
const boost::program_options::options_description& deck_schema();

// Typed, range-checked configuration. Throws DeckError naming key and line.
Config load_config(const Deck& deck);

}  // namespace quartet
