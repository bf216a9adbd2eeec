#include "quartet/core/config.hpp"

namespace po = boost::program_options;

namespace quartet {

const po::options_description& deck_schema() {
  static const po::options_description schema = [] {
    RunConfig run;
    PlacementConfig pl;
    DistConfig dist;
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
  Config c{deck, {}, {}, {}};
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
  if (c.dist.backend == "nccl" && c.dist.device == "cpu")
    deck.fail("dist.backend", "is nccl, which needs GPUs, but dist.device is cpu");
  return c;
}

}  // namespace quartet
