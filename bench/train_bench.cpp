// Training throughput of the sharded engine: one Llama-shaped model trained with bf16 compute,
// float32 master weights and AdamW, sharded (ZeRO-3) over every rank of the job, against the
// same model unsharded on each GPU alone; with the measured peak memory against the plan.
//   mpirun -np 2 build/bench/train_bench [--hidden 2048 --layers 16 --heads 16 --kv-heads 8
//        --ffn 5632 --vocab 32000 --micro-batch 8 --seq 512 --accum 2 --steps 6 --warmup 2
//        --checkpointing 0 --reshard-after-forward 1 --dtype bf16]
// Defaults: the 886M model of the performance issue. MFU counts 6 N + 12 L h T FLOPs per token
// (PaLM's formula: weights, and attention scores and values forward and backward) against
// bf16's 790 TFLOP/s measured on one H200. "comm alone" is every all-gather and reduce-scatter
// of one step issued back to back with nothing else running; "hidden" is the share of it the
// sharded step did not add to the unsharded step's time (same per-rank work).
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/log.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/device_memory.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/world.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/sharded_model.hpp"

using namespace quartet;

namespace {

constexpr double kPeakFlops = 790e12;  // bf16, one H200, measured (developers' guide)

struct Args {
  int hidden = 2048, layers = 16, heads = 16, kv_heads = 8, ffn = 5632, vocab = 32000;
  int micro_batch = 8, seq = 512, accum = 2, steps = 6, warmup = 2;
  bool checkpointing = false;
  bool reshard_after_forward = true;
  std::string dtype = "bf16";
};

struct Result {
  double step_s = 0, tokens_per_s = 0, mfu = 0;
  double peak_gib = 0, plan_gib = 0;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ModelConfig model_config(const Args& a) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = a.vocab;
  c.hidden_size = a.hidden;
  c.num_layers = a.layers;
  c.num_heads = a.heads;
  c.num_kv_heads = a.kv_heads;
  c.intermediate_size = a.ffn;
  c.max_positions = std::max(a.seq, 2048);
  c.complete("bench model");
  return c;
}

// The memory plan of the same work: the actor alone on `ranks` ranks, sequences of `seq`.
double planned_gib(const Args& a, int ranks) {
  std::string deck =
      "[placement]\nactor = " + std::to_string(ranks) + "\ncritic = 0\nreference = 0\nreward = 0\n"
      "[model.actor]\npath = random:llama\ndtype = " + std::string(a.dtype == "bf16" ? "bfloat16" : "float32") +
      "\nhidden = " + std::to_string(a.hidden) + "\nlayers = " + std::to_string(a.layers) +
      "\nheads = " + std::to_string(a.heads) + "\nkv_heads = " + std::to_string(a.kv_heads) +
      "\nffn = " + std::to_string(a.ffn) + "\nvocab = " + std::to_string(a.vocab) +
      "\nmax_positions = " + std::to_string(std::max(a.seq, 2048)) +
      "\ncheckpointing = " + (a.checkpointing ? "true" : "false") +
      "\nreshard_after_forward = " + (a.reshard_after_forward ? "true" : "false") +
      "\n[train]\nmicro_batch = " + std::to_string(a.micro_batch) +
      "\n[rollout]\nbatch = 1\nmax_prompt_tokens = " + std::to_string(a.seq / 2) +
      "\nmax_new_tokens = " + std::to_string(a.seq - a.seq / 2) + "\n[dist]\ndevice_memory = 141GiB\n";
  auto config = load_config(Deck("train_bench", deck, {}, deck_schema()));
  auto plan = make_memory_plan(config, ranks);
  for (const auto& rp : plan.ranks[0].roles)
    for (const auto& phase : rp.phases)
      if (phase.name == "train") return static_cast<double>(phase.device_bytes()) / (1ull << 30);
  return 0;
}

Result train(const Args& a, Collectives& group, torch::Device device) {
  const ModelConfig cfg = model_config(a);
  ShardOptions so;
  so.dtype = a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  so.checkpointing = a.checkpointing;
  so.reshard_after_forward = a.reshard_after_forward;
  synchronize_device(device);
  reset_peak_memory(device);
  Result r;
  {
    ShardedModel model(cfg, Head::causal_lm, group, so, source_random(cfg, 1, device));
    AdamWOptions ao;
    ao.lr = 1e-5;
    ShardedAdamW opt(model, ao);
    auto gen = at::detail::createCPUGenerator(42 + static_cast<uint64_t>(group.rank()));
    auto ids = torch::randint(a.vocab, {a.micro_batch, a.seq}, gen, torch::kLong).to(device);
    auto mask = torch::ones({a.micro_batch, a.seq}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto step = [&] {
      model.zero_grad();
      for (int m = 0; m < a.accum; ++m) {
        auto logits = model.forward(ids, mask);
        auto lp = logits.narrow(1, 0, a.seq - 1).reshape({-1, a.vocab}).to(torch::kFloat32);
        auto loss = torch::cross_entropy_loss(lp, ids.narrow(1, 1, a.seq - 1).reshape({-1})) / a.accum;
        model.backward(loss);
      }
      opt.step();
    };
    for (int i = 0; i < a.warmup; ++i) step();
    synchronize_device(device);
    group.barrier();
    const double t0 = now();
    for (int i = 0; i < a.steps; ++i) step();
    synchronize_device(device);
    group.barrier();
    r.step_s = (now() - t0) / a.steps;
    int64_t params = 0;
    for (const auto& u : model.layout()) params += u.numel;
    const double tokens = static_cast<double>(a.micro_batch) * a.seq * a.accum * group.size();
    r.tokens_per_s = tokens / r.step_s;
    const double flops_per_token = 6.0 * params + 12.0 * a.layers * a.hidden * a.seq;
    r.mfu = r.tokens_per_s * flops_per_token / (kPeakFlops * group.size());
    r.peak_gib = static_cast<double>(device_memory(device).peak_allocated) / (1ull << 30);
  }
  r.plan_gib = planned_gib(a, group.size());
  return r;
}

// Every collective of one sharded step, back to back: forward gathers each unit once, backward
// gathers each block again, and reduce-scatters each unit's gradients in float32 per micro-batch.
double comm_alone(const Args& a, Collectives& group, torch::Device device) {
  const ModelConfig cfg = model_config(a);
  Transformer probe(cfg, Head::causal_lm, torch::TensorOptions().dtype(torch::kBFloat16), false);
  auto layout = make_flat_layout(probe, group.size());
  const auto dtype = a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  int64_t biggest = 0;
  for (const auto& u : layout) biggest = std::max(biggest, u.padded);
  auto full = torch::empty({biggest}, torch::TensorOptions().dtype(dtype).device(device));
  auto full32 = torch::empty({biggest}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  auto run = [&] {
    for (int m = 0; m < a.accum; ++m)
      for (size_t u = 0; u < layout.size(); ++u) {
        const int64_t n = layout[u].padded, s = layout[u].shard;
        auto f = full.narrow(0, 0, n);
        group.all_gather(f.narrow(0, 0, s).clone(), f);
        if (u > 0) group.all_gather(f.narrow(0, 0, s).clone(), f);
        group.reduce_scatter(full32.narrow(0, 0, n), full32.narrow(0, 0, s).clone(), ReduceOp::avg);
      }
  };
  run();
  synchronize_device(device);
  group.barrier();
  const double t0 = now();
  for (int i = 0; i < 3; ++i) run();
  synchronize_device(device);
  group.barrier();
  return (now() - t0) / 3;
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  Args a;
  std::map<std::string, int*> ints = {{"--hidden", &a.hidden}, {"--layers", &a.layers}, {"--heads", &a.heads},
                                      {"--kv-heads", &a.kv_heads}, {"--ffn", &a.ffn}, {"--vocab", &a.vocab},
                                      {"--micro-batch", &a.micro_batch}, {"--seq", &a.seq}, {"--accum", &a.accum},
                                      {"--steps", &a.steps}, {"--warmup", &a.warmup}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (ints.count(k)) *ints[k] = std::stoi(v);
    else if (k == "--checkpointing") a.checkpointing = v == "1" || v == "true";
    else if (k == "--reshard-after-forward") a.reshard_after_forward = v == "1" || v == "true";
    else if (k == "--dtype") a.dtype = v;
    else {
      printf0("unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    auto device = select_device(DeviceKind::automatic, world.local_rank());
    std::vector<int> all;
    for (int r = 0; r < world.size(); ++r) all.push_back(r);
    auto make = [&](const std::string& name, std::vector<int> ranks, MPI_Comm comm) {
      return device.is_cuda() ? make_nccl_collectives(name, std::move(ranks), comm, nullptr)
                              : make_mpi_collectives(name, std::move(ranks), comm, nullptr);
    };
    auto whole = make("world", all, world.comm());
    auto alone = make("self", {world.rank()}, MPI_COMM_SELF);
    {
      Transformer probe(model_config(a), Head::causal_lm, torch::TensorOptions().dtype(torch::kBFloat16), false);
      int64_t n = 0;
      for (const auto& p : probe->parameters()) n += p.numel();
      printf0("train_bench: llama %.0fM parameters (hidden %d, %d layers, %d/%d heads, ffn %d, vocab %d), %s, "
              "micro-batch %d x %d tokens, %d micro-batches per step, checkpointing %s, reshard after forward %s, "
              "%d ranks, %s\n",
              n / 1e6, a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.dtype.c_str(), a.micro_batch,
              a.seq, a.accum, a.checkpointing ? "on" : "off", a.reshard_after_forward ? "yes" : "no", world.size(), whole->backend_name());
    }
    Result single = train(a, *alone, device);
    Result sharded = world.size() > 1 ? train(a, *whole, device) : single;
    const double comm = world.size() > 1 ? comm_alone(a, *whole, device) : 0;
    printf0("%-22s %6s %10s %12s %7s %10s %10s\n", "run", "ranks", "step_ms", "tokens/s", "MFU", "peak_GiB", "plan_GiB");
    printf0("%-22s %6d %10.1f %12.0f %6.1f%% %10.2f %10.2f\n", "unsharded, per GPU", 1, single.step_s * 1e3,
            single.tokens_per_s, single.mfu * 100, single.peak_gib, single.plan_gib);
    if (world.size() > 1) {
      printf0("%-22s %6d %10.1f %12.0f %6.1f%% %10.2f %10.2f\n", "sharded (ZeRO-3)", world.size(), sharded.step_s * 1e3,
              sharded.tokens_per_s, sharded.mfu * 100, sharded.peak_gib, sharded.plan_gib);
      const double exposed = std::max(0.0, sharded.step_s - single.step_s);
      printf0("scaling efficiency %.1f%% (sharded tokens/s over %d x unsharded); comm alone %.1f ms per step, "
              "exposed %.1f ms, hidden %.0f%%\n",
              100 * sharded.tokens_per_s / (world.size() * single.tokens_per_s), world.size(), comm * 1e3,
              exposed * 1e3, comm > 0 ? 100 * std::max(0.0, 1 - exposed / comm) : 0.0);
    }
    // Every rank's peak, so a lopsided rank shows.
    std::fprintf(stderr, "rank %d: peak %.2f GiB unsharded, %.2f GiB sharded\n", world.rank(), single.peak_gib,
                 sharded.peak_gib);
  } catch (const std::exception& e) {
    eprintf_rank("train_bench: %s\n", e.what());
    world.abort(1);
  }
  return 0;
}
