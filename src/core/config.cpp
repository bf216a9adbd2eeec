#include "quartet/core/config.hpp"

#include "quartet/core/files.hpp"

namespace po = boost::program_options;

namespace quartet {

const po::options_description& deck_schema() {
  static const po::options_description schema = [] {
    RunConfig run;
    PlacementConfig pl;
    DistConfig dist;
    RolloutConfig ro;
    po::options_description d("Deck keys (section.key, default)");
    d.add_options()
      ("run.name", po::value<std::string>()->default_value(run.name), "run name, for logs and the run file")
      ("run.out", po::value<std::string>()->default_value(run.out), "output directory (run.h5, checkpoints/)")
      ("run.seed", po::value<std::uint64_t>()->default_value(run.seed), "base random seed")
      ("run.iterations", po::value<int>()->default_value(run.iterations), "iterations of the main loop (count, >= 1)")
      ("placement.mode", po::value<std::string>()->default_value(pl.mode), "disjoint (one role per rank) | colocated (every role on every rank)")
      ("placement.actor", po::value<int>()->default_value(-1), "ranks for the actor (policy); >= 1")
      ("placement.critic", po::value<int>()->default_value(-1), "ranks for the critic (value model); 0 = no critic")
      ("placement.reference", po::value<int>()->default_value(-1), "ranks for the frozen reference policy; 0 = none")
      ("placement.reward", po::value<int>()->default_value(-1), "ranks for the reward model; 0 = none (rule reward)")
      ("dist.backend", po::value<std::string>()->default_value(dist.backend), "collectives inside a group: auto (nccl on GPUs, else mpi) | nccl | mpi")
      ("dist.device", po::value<std::string>()->default_value(dist.device), "auto (a GPU when there is one) | cuda | cpu")
      ("dist.watchdog_timeout", po::value<double>()->default_value(dist.watchdog_timeout), "seconds a collective or exchange may stall before the job is aborted (> 0)");
    for (const char* role : {"actor", "critic", "reference", "reward"}) {
      std::string sec = std::string("model.") + role;
      d.add_options()
        ((sec + ".path").c_str(), po::value<std::string>()->default_value(""), "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
        ((sec + ".dtype").c_str(), po::value<std::string>()->default_value("float32"), "float32 | bfloat16 | float16");
    }
    d.add_options()
      ("rollout.prompts", po::value<std::string>()->default_value(""), "prompts file: JSONL, one {\"prompt\": \"...\"} per line")
      ("rollout.batch", po::value<int>()->default_value(ro.batch), "prompts per generation batch and rank (count, >= 1)")
      ("rollout.max_new_tokens", po::value<int>()->default_value(ro.max_new_tokens), "tokens generated at most per prompt (count, >= 1)")
      ("rollout.temperature", po::value<double>()->default_value(ro.temperature), "sampling temperature (>= 0; 0 = greedy)")
      ("rollout.top_k", po::value<int>()->default_value(ro.top_k), "sample from the k likeliest tokens (count; 0 = off)")
      ("rollout.top_p", po::value<double>()->default_value(ro.top_p), "nucleus sampling mass (0 < p <= 1; 1 = off)")
      ("rollout.stop", po::value<std::string>()->default_value(""), "comma-separated stop tokens (token strings); EOS always stops");
    return d;
  }();
  return schema;
}

namespace {
void require_one_of(const Deck& deck, const std::string& key, const std::string& value,
                    std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += list.empty() ? a : std::string(" | ") + a;
  }
  deck.fail(key, "is '" + value + "'; expected one of: " + list);
}
}  // namespace

Config load_config(const Deck& deck) {
  Config c{deck, {}, {}, {}, {}, {}, {}, {}, {}};
  c.run.name = deck.get<std::string>("run.name");
  c.run.out = deck.get<std::string>("run.out");
  c.run.seed = deck.get<std::uint64_t>("run.seed");
  c.run.iterations = deck.get<int>("run.iterations");
  if (c.run.iterations < 1) deck.fail("run.iterations", "must be at least 1");

  c.placement.mode = deck.get<std::string>("placement.mode");
  require_one_of(deck, "placement.mode", c.placement.mode, {"disjoint", "colocated"});
  c.placement.actor = deck.get<int>("placement.actor");
  c.placement.critic = deck.get<int>("placement.critic");
  c.placement.reference = deck.get<int>("placement.reference");
  c.placement.reward = deck.get<int>("placement.reward");
  for (const char* k : {"placement.actor", "placement.critic", "placement.reference", "placement.reward"})
    if (deck.given(k) && deck.get<int>(k) < 0) deck.fail(k, "must not be negative");

  c.dist.backend = deck.get<std::string>("dist.backend");
  require_one_of(deck, "dist.backend", c.dist.backend, {"auto", "nccl", "mpi"});
  c.dist.device = deck.get<std::string>("dist.device");
  require_one_of(deck, "dist.device", c.dist.device, {"auto", "cuda", "cpu"});
  c.dist.watchdog_timeout = deck.get<double>("dist.watchdog_timeout");
  if (!(c.dist.watchdog_timeout > 0)) deck.fail("dist.watchdog_timeout", "must be > 0 seconds");
  auto model = [&](const std::string& role, ModelSectionConfig& m) {
    m.path = deck.get<std::string>("model." + role + ".path");
    m.dtype = deck.get<std::string>("model." + role + ".dtype");
    require_one_of(deck, "model." + role + ".dtype", m.dtype, {"float32", "bfloat16", "float16"});
    if (!m.path.empty() && !is_directory(m.path))
      deck.fail("model." + role + ".path", "is '" + m.path + "', which is not a directory");
  };
  model("actor", c.actor);
  model("critic", c.critic);
  model("reference", c.reference);
  model("reward", c.reward);

  c.rollout.prompts = deck.get<std::string>("rollout.prompts");
  if (!c.rollout.prompts.empty() && !is_regular_file(c.rollout.prompts))
    deck.fail("rollout.prompts", "is '" + c.rollout.prompts + "', which is not a readable file");
  c.rollout.batch = deck.get<int>("rollout.batch");
  if (c.rollout.batch < 1) deck.fail("rollout.batch", "must be at least 1");
  c.rollout.max_new_tokens = deck.get<int>("rollout.max_new_tokens");
  if (c.rollout.max_new_tokens < 1) deck.fail("rollout.max_new_tokens", "must be at least 1");
  c.rollout.temperature = deck.get<double>("rollout.temperature");
  if (!(c.rollout.temperature >= 0)) deck.fail("rollout.temperature", "must be >= 0");
  c.rollout.top_k = deck.get<int>("rollout.top_k");
  if (c.rollout.top_k < 0) deck.fail("rollout.top_k", "must be >= 0");
  c.rollout.top_p = deck.get<double>("rollout.top_p");
  if (!(c.rollout.top_p > 0 && c.rollout.top_p <= 1)) deck.fail("rollout.top_p", "must be in (0, 1]");
  c.rollout.stop = split_list(deck.get<std::string>("rollout.stop"));

  if (c.dist.backend == "nccl" && c.dist.device == "cpu")
    deck.fail("dist.backend", "is nccl, which needs GPUs, but dist.device is cpu");
  return c;
}

}  // namespace quartet
