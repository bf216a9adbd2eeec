#include "quartet/core/build_info.hpp"
#include "quartet/engine/training_checkpoint.hpp"

#include <sys/stat.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/core/utc_time.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/engine/checkpoint_config.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "quartet/io/checkpoint_identity.hpp"
#include "quartet/io/run_file.hpp"
#include "quartet/io/sharded_h5.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/model/model_spec.hpp"

namespace quartet {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool saved_role(const Runtime& rt, const CheckpointStage& stage, Role role) {
  return rt.placement.has(role) && has_model(rt.config, role) &&
         std::find(stage.trained.begin(), stage.trained.end(), role) != stage.trained.end();
}

// One trained model into <dir>/<role>.h5, collectively over its group.
void write_model(const std::string& dir, const RoleModel& m, Role role, int64_t iteration, const std::string& run_id) {
  ShardedModel& model = *m.model;
  const auto& layout = model.layout();
  const int rank = model.group().rank();
  const std::string architecture = architecture_name(m.spec.config, m.spec.head);
  const std::string dtype = dtype_name(model.options().dtype);
  ShardedH5Writer w(dir + "/" + role_name(role) + ".h5", m.comm);
  w.write_family("model", layout, rank, model.current_shards(), model.options().dtype);
  if (m.optimizer) {
    // A float32 model's parameters are its master weights (equal to the optimizer's own
    // master, if it keeps one offloaded); current_shards() also finds them while parked.
    const bool fp32 = model.options().dtype == torch::kFloat32;
    w.write_family("optimizer/master", layout, rank, fp32 ? model.current_shards() : m.optimizer->master_shards(),
                   torch::kFloat32);
    w.write_family("optimizer/exp_avg", layout, rank, m.optimizer->exp_avg_shards(), torch::kFloat32);
    w.write_family("optimizer/exp_avg_sq", layout, rank, m.optimizer->exp_avg_sq_shards(), torch::kFloat32);
  }
  w.attribute("role", std::string(role_name(role)));
  w.attribute("architecture", architecture);
  w.attribute("head", std::string(head_name(m.spec.head)));
  w.attribute("dtype", std::string(dtype));
  w.attribute("config_json", m.spec.config.to_json(architecture, dtype));
  w.attribute("group_size", static_cast<int64_t>(model.group().size()));
  w.attribute("iteration", iteration);
  w.attribute("run_id", run_id);
  w.attribute("optimizer_steps", m.optimizer ? m.optimizer->steps() : int64_t{0});
  w.close();
}

// Every rank's generator states, gathered on rank 0 as a [world, bytes] tensor.
torch::Tensor gather_states(const torch::Tensor& mine, const World& world) {
  auto state = mine.contiguous().to(torch::kCPU);
  int bytes = static_cast<int>(state.numel());
  int lo = bytes, hi = bytes;
  watched::allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, world.comm(), "the random states' smallest size");
  watched::allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, world.comm(), "the random states' largest size");
  QUARTET_CHECK(lo == hi, "checkpoint: the ranks' random generator states differ in size (" + std::to_string(lo) +
                              " vs " + std::to_string(hi) + " bytes)");
  auto all = torch::empty({world.rank() == 0 ? world.size() : 0, bytes}, torch::kUInt8);
  watched::gather(state.data_ptr(), bytes, MPI_BYTE, world.rank() == 0 ? all.data_ptr() : nullptr, 0, world.comm(),
                  "every rank's random states");
  return all;
}

at::Generator default_generator(torch::Device device) { return at::globalContext().defaultGenerator(device); }

int64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

CheckpointWrite save_training_checkpoint(Runtime& rt, const RoleModels& models, const TrainerState& state,
                                         const CheckpointStage& stage) {
  const World& world = rt.world;
  const Config& cfg = rt.config;
  watched::barrier(world.comm(), "the start of a checkpoint");
  const double start = now();

  // The numbers only some ranks hold reach rank 0: the first trained role's first rank (train's
  // actor) holds the loop state, each trained group's first rank its optimizer's step count. A slot is filled by its
  // one owner and zero elsewhere, so the sum is exact.
  enum { kIteration, kActorStep, kCriticStep, kCriticTotal, kEpoch, kPosition, kActorSteps, kCriticSteps, kInts };
  enum { kKlCoef, kMean, kVar, kCount, kSeconds, kDoubles };
  std::vector<int64_t> ints(kInts, 0);
  std::vector<double> doubles(kDoubles, 0.0);
  if (RoleModel* a = models.get(stage.trained.front()); a && a->group->rank() == 0) {
    ints[kIteration] = state.iteration;
    ints[kActorStep] = state.actor_step;
    ints[kEpoch] = state.cursor.epoch;
    ints[kPosition] = state.cursor.position;
    ints[kActorSteps] = a->optimizer->steps();
    doubles[kKlCoef] = state.kl_coef;
    doubles[kMean] = state.moments.mean;
    doubles[kVar] = state.moments.var;
    doubles[kCount] = state.moments.count;
    doubles[kSeconds] = state.train_seconds;
  }
  if (RoleModel* c = models.get(Role::critic); c && c->group->rank() == 0 && saved_role(rt, stage, Role::critic)) {
    ints[kCriticStep] = state.critic_step;
    ints[kCriticTotal] = state.critic_total;
    ints[kCriticSteps] = c->optimizer->steps();
  }
  watched::allreduce(MPI_IN_PLACE, ints.data(), kInts, MPI_INT64_T, MPI_SUM, world.comm(), "the checkpoint's counters");
  watched::allreduce(MPI_IN_PLACE, doubles.data(), kDoubles, MPI_DOUBLE, MPI_SUM, world.comm(), "the checkpoint's numbers");
  const int64_t iteration = ints[kIteration];

  const std::string dir = begin_checkpoint(cfg.get<RunConfig>().out, iteration, world.comm());
  std::vector<std::string> files;
  for (Role role : stage.trained) {
    if (!saved_role(rt, stage, role)) continue;
    files.push_back(std::string(role_name(role)) + ".h5");
    // Colocated: one group holds both models and writes them one after the other.
    if (const RoleModel* m = models.get(role)) write_model(dir, *m, role, iteration, state.run_id);
  }

  auto cpu_states = gather_states(default_generator(torch::kCPU).get_state(), world);
  torch::Tensor cuda_states;
  if (rt.device.is_cuda()) cuda_states = gather_states(default_generator(rt.device).get_state(), world);
  if (world.rank() == 0) {
    auto i64 = [](int64_t v) { return torch::tensor({v}, torch::kInt64); };
    auto f64 = [](double v) { return torch::tensor({v}, torch::kFloat64); };
    NamedTensors t;
    t.emplace_back("iteration", i64(iteration));
    t.emplace_back("actor_step", i64(ints[kActorStep]));
    t.emplace_back("critic_step", i64(ints[kCriticStep]));
    t.emplace_back("critic_total", i64(ints[kCriticTotal]));
    t.emplace_back("cursor_epoch", i64(ints[kEpoch]));
    t.emplace_back("cursor_position", i64(ints[kPosition]));
    t.emplace_back("kl_coef", f64(doubles[kKlCoef]));
    t.emplace_back("reward_moments", torch::tensor({doubles[kMean], doubles[kVar], doubles[kCount]}, torch::kFloat64));
    t.emplace_back("train_seconds", f64(doubles[kSeconds]));
    t.emplace_back("world_size", i64(world.size()));
    // The model files' own counts, for the cross-check on resume.
    t.emplace_back("actor_optimizer_steps", i64(ints[kActorSteps]));
    t.emplace_back("critic_optimizer_steps", i64(ints[kCriticSteps]));
    t.emplace_back("rng_cpu", cpu_states);
    if (cuda_states.defined()) t.emplace_back("rng_cuda", cuda_states);
    write_tensors_h5(dir + "/trainer.h5", t, {{"run_id", state.run_id}});
  }
  files.push_back("trainer.h5");
  watched::barrier(world.comm(), "trainer.h5 written");  // closed before anyone checksums it
  const double written = now();

  nlohmann::json info;
  info["run_name"] = cfg.get<RunConfig>().name;
  info["run_id"] = state.run_id;
  info["iteration"] = iteration;
  info["world_size"] = world.size();
  info["placement"] = rt.placement.describe();
  info["stage"] = stage.name;
  info["algorithm"] = stage.algorithm.empty() ? stage.name : stage.algorithm;
  info["git_commit"] = git_commit();
  info["version"] = QUARTET_VERSION;
  info["deck"] = cfg.deck.resolved();
  info["trainer_state"] = "trainer.h5";
  info["models"] = nlohmann::json::object();
  for (Role role : stage.trained) {
    if (!saved_role(rt, stage, role)) continue;
    const ModelSpec spec = resolve_model(cfg, role);
    const std::string architecture = architecture_name(spec.config, spec.head);
    int64_t parameters = 0;
    for (int64_t n : unit_parameter_counts(spec.config, spec.head)) parameters += n;
    const ModelSpec owner = resolve_model(cfg, tokenizer_role(cfg));
    nlohmann::json m;
    m["file"] = std::string(role_name(role)) + ".h5";
    m["group_size"] = static_cast<int64_t>(rt.placement.ranks_of(role).size());
    m["architecture"] = architecture;
    m["head"] = head_name(spec.head);
    m["dtype"] = dtype_name(spec.dtype);
    m["config_json"] = spec.config.to_json(architecture, dtype_name(spec.dtype));
    m["source"] = model_section(cfg, role).path;
    // The run's tokenizer is the actor's, an rm deck's the reward model's (the built-in one for
    // random models: "").
    m["tokenizer_dir"] = owner.random ? "" : owner.dir;
    m["parameters"] = parameters;
    m["optimizer_steps"] = role == stage.trained.front() ? ints[kActorSteps] : ints[kCriticSteps];
    info["models"][role_name(role)] = m;
  }
  commit_checkpoint(cfg.get<RunConfig>().out, iteration, files, info, world.comm(), cfg.get<CheckpointConfig>().keep, cfg.get<CheckpointConfig>().keep_every);

  CheckpointWrite out;
  out.dir = dir;
  out.seconds = now() - start;
  out.write_seconds = written - start;
  double times[2] = {out.seconds, out.write_seconds};
  watched::allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, MPI_MAX, world.comm(), "the checkpoint's times");
  out.seconds = times[0];
  out.write_seconds = times[1];
  for (const auto& f : files) out.bytes += file_bytes(dir + "/" + f);
  return out;
}

std::string new_run_id(const World& world) {
  std::string id;
  if (world.rank() == 0) {
    std::random_device device;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", device(), device(), device(), device());
    id = buf;
  }
  watched::bcast_text(&id, 0, world.comm(), "the run's id");
  return id;
}

namespace {

// The stage that wrote a checkpoint (a manifest from before info.stage existed: train).
std::string written_by(const Manifest& m) {
  const auto& info = m.info;
  return info.is_object() && info.contains("stage") && info["stage"].is_string() ? info["stage"].get<std::string>()
                                                                                 : "train";
}

CheckpointNeeds resume_needs(const Runtime& rt, const CheckpointStage& stage) {
  std::vector<std::string> files;
  for (Role role : stage.trained)
    if (saved_role(rt, stage, role)) files.push_back(std::string(role_name(role)) + ".h5");
  CheckpointNeeds needs = train_checkpoint_needs("resuming this run", files);
  needs.foreign = [name = stage.name](const Manifest& m) {
    const std::string by = written_by(m);
    return by == name ? std::string()
                      : "a checkpoint of quartet " + by + ", which quartet " + name +
                            " does not continue (give run.out a directory of its own)";
  };
  return needs;
}

}  // namespace

namespace {

// A step found by itself (checkpoint.resume = auto) must be this run's: one copied from another
// run, or a run.out two runs share, would continue the run file with another run's state in
// silence. Collective: rank 0 reads the two run ids (or fails to), and every rank gets them.
void check_same_run(const Config& cfg, const World& world, const std::string& step, const CheckpointStage& stage) {
  const std::string run_file = cfg.get<RunConfig>().out + "/run.h5";
  // One broadcast: "<run.h5's id>\n<the step's id>\n<rank 0's error, if any>" (ids are hex).
  std::string ids;
  if (world.rank() == 0) {
    try {
      ids = run_file_run_id(run_file) + "\n" + read_attribute_h5(step + "/trainer.h5", "run_id") + "\n";
    } catch (const std::exception& e) {
      ids = "\n\n" + std::string(e.what());
    }
  }
  watched::bcast_text(&ids, 0, world.comm(), "the run ids of run.h5 and the checkpoint");
  const size_t a = ids.find('\n'), b = ids.find('\n', a + 1);
  const std::string file_run = ids.substr(0, a), step_run = ids.substr(a + 1, b - a - 1), error = ids.substr(b + 1);
  QUARTET_CHECK(error.empty(), error);
  if (file_run.empty() || step_run == file_run) return;
  cfg.deck.fail("checkpoint.resume",
                "is auto, and the newest intact checkpoint, " + step + ", belongs to run " + step_run + ", but " +
                    run_file + " to run " + file_run + ": a step copied from another run, or one run.out for two "
                    "runs. Give run.out a directory of its own, or name the step in checkpoint.resume to " +
                    stage.name + " from it on purpose");
}

}  // namespace

std::optional<std::string> choose_resume_checkpoint(Runtime& rt, const CheckpointStage& stage) {
  const Config& cfg = rt.config;
  const World& world = rt.world;
  const std::string& how = cfg.get<CheckpointConfig>().resume;
  if (how == "never") {
    const auto steps = list_checkpoint_steps(cfg.get<RunConfig>().out);
    if (!steps.empty())
      cfg.deck.fail("checkpoint.resume", "is never, but " + checkpoints_dir(cfg.get<RunConfig>().out) + " already holds step_" +
                                             std::to_string(steps.back()) +
                                             ": set it to auto to continue that run, or give run.out a new directory");
    return std::nullopt;
  }
  if (how != "auto") {
    const auto problems = verify_checkpoint(how, world.comm(), resume_needs(rt, stage));
    if (!problems.empty()) {
      std::string all;
      for (const auto& p : problems) all += "\n  " + p;
      cfg.deck.fail("checkpoint.resume", "names " + how + ", which is damaged:" + all);
    }
    return how;
  }
  // Listed before the collective search: once it returns, rank 0 may move the checkpoints
  // aside, and a rank listing later would find none and take the run for a fresh one.
  const std::string& out = cfg.get<RunConfig>().out;
  const std::vector<int64_t> unfinished = unfinished_checkpoint_steps(out);
  const bool any_committed = list_checkpoint_steps(out).size() > unfinished.size();
  std::vector<std::string> warnings;
  auto found = find_latest_checkpoint(out, world.comm(), &warnings, resume_needs(rt, stage));
  if (found || !any_committed) {
    // A write cut short (a kill while it ran) is no damage, and no reason to stop: its steps
    // go, as the next commit would remove them, and the run goes on from the newest committed
    // one, or afresh when none ever was.
    // find_latest_checkpoint's words on them ("checkpoint step_N skipped: ...", "checkpoints/latest
    // names step_N, ...") give way to the one line below.
    auto about_unfinished = [&](const std::string& w) {
      for (int64_t s : unfinished) {
        const std::string name = "step_" + std::to_string(s);
        if (w.rfind("checkpoint " + name + " skipped:", 0) == 0 || w.find("latest names " + name + ",") != std::string::npos)
          return true;
      }
      return false;
    };
    for (const auto& w : warnings)
      if (!about_unfinished(w)) printf0("%s: warning: %s\n", stage.name.c_str(), w.c_str());
    if (!unfinished.empty()) {
      std::string names;
      for (int64_t s : unfinished) names += (names.empty() ? "step_" : ", step_") + std::to_string(s);
      printf0("%s: %s under %s never committed (no manifest.json: its write was cut short): removed; %s\n",
              stage.name.c_str(), names.c_str(), checkpoints_dir(out).c_str(),
              found ? ("resuming from " + base_name(found->dir)).c_str() : "no checkpoint was ever committed: starting afresh");
      if (world.rank() == 0) remove_unfinished_checkpoints(out, unfinished);
      watched::barrier(world.comm(), "the unfinished checkpoints removed");
    }
    if (found) check_same_run(cfg, world, found->dir, stage);
    return found ? std::optional<std::string>(found->dir) : std::nullopt;
  }
  // Checkpoints, and none of them intact: starting over would overwrite run.h5's history and
  // the damaged steps, so that takes the deck's say-so.
  std::string all;
  for (const auto& w : warnings) all += "\n  " + w;
  const std::string cdir = checkpoints_dir(cfg.get<RunConfig>().out);
  if (cfg.get<CheckpointConfig>().on_damaged == OnDamaged::refuse)
    cfg.deck.fail("checkpoint.on_damaged",
                  "is refuse, and no checkpoint under " + cdir + " is intact:" + all +
                      "\n  Repair or remove them, name an intact one in checkpoint.resume, or set "
                      "checkpoint.on_damaged = start_over to move them aside and start at iteration 0");
  std::string aside;
  if (world.rank() == 0) {
    aside = move_aside(cdir, ".damaged-" + utc_stamp());
    for (const auto& w : warnings) printf0("%s: warning: %s\n", stage.name.c_str(), w.c_str());
    printf0("%s: no intact checkpoint: they are now in %s (checkpoint.on_damaged = start_over); starting at "
            "iteration 0\n", stage.name.c_str(), aside.c_str());
  }
  watched::barrier(world.comm(), "the damaged checkpoints moved aside");
  return std::nullopt;
}

TrainerState load_trainer_state(Runtime& rt, const std::string& dir, const CheckpointStage& stage) {
  const World& world = rt.world;
  const std::string path = dir + "/trainer.h5";
  auto i64 = [&](const char* name) { return read_tensor_h5(path, name).reshape({-1})[0].item<int64_t>(); };
  auto f64 = [&](const char* name) { return read_tensor_h5(path, name).reshape({-1}); };
  TrainerState s;
  s.iteration = i64("iteration");
  s.actor_step = i64("actor_step");
  s.critic_step = i64("critic_step");
  s.critic_total = i64("critic_total");
  s.cursor.epoch = i64("cursor_epoch");
  s.cursor.position = i64("cursor_position");
  s.kl_coef = f64("kl_coef")[0].item<double>();
  auto moments = f64("reward_moments");
  QUARTET_CHECK(moments.numel() == 3, path + ": reward_moments has " + std::to_string(moments.numel()) +
                                          " values, expected 3 (mean, var, count)");
  s.moments.mean = moments[0].item<double>();
  s.moments.var = moments[1].item<double>();
  s.moments.count = moments[2].item<double>();
  s.train_seconds = f64("train_seconds")[0].item<double>();
  s.run_id = read_attribute_h5(path, "run_id");
  const int64_t saved_world = i64("world_size");
  if (saved_world == world.size()) {
    auto cpu = read_tensor_h5(path, "rng_cpu");
    default_generator(torch::kCPU).set_state(cpu[world.rank()].clone());
    if (rt.device.is_cuda()) {
      auto cuda = read_tensor_h5(path, "rng_cuda");
      default_generator(rt.device).set_state(cuda[world.rank()].clone());
    }
  } else {
    printf0("%s: the checkpoint was written by %lld ranks, this job has %d: the random generators restart "
            "from the run's seeds (sampling and shuffling are seeded per iteration and do not depend on them)\n",
            stage.name.c_str(), static_cast<long long>(saved_world), world.size());
  }
  return s;
}

}  // namespace quartet
