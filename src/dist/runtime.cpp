#include "quartet/dist/runtime.hpp"

#include <ATen/Context.h>
#include <mpi.h>

#include <mutex>


#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {
namespace {

// Rank 0 reads the deck and sends its text to everyone: all ranks parse the same bytes, so they
// reach the same verdict, even where file systems lag behind each other.
std::string read_deck_everywhere(const World& world, const std::string& path, std::string* error) {
  std::string text;
  int ok = 1;
  if (world.rank() == 0) {
    try {
      text = read_deck_file(path);
    } catch (const DeckError& e) {
      ok = 0;
      text = e.what();
    }
  }
  watched::bcast(&ok, 1, MPI_INT, 0, world.comm(), "whether rank 0 could read the deck");
  watched::bcast_text(&text, 0, world.comm(), "the deck");
  if (!ok) *error = text;
  return ok ? text : std::string();
}

// LibTorch seeds its default generators from the operating system's entropy at first use, so a
// run's recorded generator states (trainer.h5's rng_cpu, rng_cuda) would differ between two
// runs of one deck. Sampling and shuffling draw from generators of their own, seeded per
// iteration; anything that still draws from a default one now does so reproducibly too.
void seed_default_generators(std::uint64_t seed, int rank, const torch::Device& device) {
  const std::uint64_t mine = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank) + 1;
  for (const torch::Device d : {torch::Device(torch::kCPU), device}) {
    if (d.is_cuda() && !d.has_index()) continue;
    auto gen = at::globalContext().defaultGenerator(d);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(mine);
  }
}

}  // namespace

std::unique_ptr<Runtime> start_runtime(const World& world, const std::string& deck_path,
                                       const std::vector<std::string>& overrides, const DeckSections& sections) {
  // The watchdog first, so that start-up's collectives are watched too: under the default
  // timeout until the deck says otherwise.
  auto watchdog = std::make_unique<Watchdog>(DistConfig{}.watchdog_timeout, Watchdog::TimeoutHandler{},
                                             world.watchdog_comm());
  Watchdog::set_process(watchdog.get());
  std::string read_error;
  std::string text = read_deck_everywhere(world, deck_path, &read_error);

  // Step 1, local on every rank: deck, typed config, placement, device.
  std::unique_ptr<Config> config;
  Placement placement;
  torch::Device device(torch::kCPU);
  bool ok = world.agree([&] {
    if (!read_error.empty()) throw DeckError(read_error);
    config = std::make_unique<Config>(sections.load(deck_path, text, overrides));
    placement = make_placement(config->get<PlacementConfig>(), world.size(), config->deck);
    device = select_device(config->get<DistConfig>().device, world.local_rank());
  });
  if (!ok) return nullptr;
  watchdog->set_timeout(config->get<DistConfig>().watchdog_timeout);

  // Step 2, collective: where every rank computes, then the checks that need all of it.
  auto devices = gather_devices(world, device);
  Backend backend = Backend::mpi;
  ok = world.agree([&] {
    backend = resolve_backend(config->get<DistConfig>(), device, config->deck);
    if (backend == Backend::nccl) check_gpu_sharing(placement, devices, config->deck);
  });
  if (!ok) return nullptr;

  if (!device.is_cuda()) configure_cpu_threads(world.local_size());
  seed_default_generators(config->get<RunConfig>().seed, world.rank(), device);
  use_kernels(config->get<KernelsConfig>());  // [kernels]: before any model is built
  printf0("quartet %s: %d rank(s), %s backend, %s\n", QUARTET_VERSION, world.size(),
          name_of(backend), placement.describe().c_str());
  printf0("---- resolved deck (%s) ----\n%s----\n", deck_path.c_str(),
          config->deck.resolved().c_str());

  auto rt = std::unique_ptr<Runtime>(
      new Runtime{world, std::move(*config), device, std::move(placement), backend, nullptr, nullptr});
  rt->watchdog = std::move(watchdog);
  rt->groups = std::make_unique<ModelGroups>(world, rt->placement, backend, rt->watchdog.get());
  return rt;
}

}  // namespace quartet
