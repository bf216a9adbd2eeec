// Generation throughput against the decode roofline: one causal LM with random weights on one
// GPU, a batch of prompts, N new tokens, through quartet::generate (the code `quartet train`
// runs), with and without CUDA graphs.
//   build/bench/generate_bench [--config inputs/models/llama-886m/config.json] [--batch 64]
//        [--prompt 128] [--prompt-min N] [--samples K] [--stops 400] [--new 128] [--reps 3]
//        [--dtype bf16] [--profile 0|1] [--decode-rows R] [--kv-block 16] [--set kernels.KEY=VALUE ...]
// --prompt-min: prompt lengths uniform in [N, --prompt] (left-padded; default: all --prompt);
// --samples: each prompt K times side by side, sharing its forward pass (GRPO's groups);
// --stops: the stop ids of the rows that stop; --decode-rows R: the greedy, stopping and top-p
// rows again with continuous batching over a paged cache of R rows (blocks of --kv-block slots);
// --paged-only 1 runs those alone (a batch whose contiguous cache would not fit).
// Workload W's generation (bench/gpu_grpo_w.sh):
//   --batch 1024 --prompt 512 --prompt-min 64 --samples 8 --new 1024 --stops 80 --decode-rows 256
// --profile 1 adds a kernel profile of one greedy generation with graphs and one without; --set
// switches quartet's kernels as the deck's [kernels] keys do (e.g. --set kernels.decode_fused_qkv=false).
// Roofline: every decoding step must read every weight once and the keys and values of every
// live row's cached tokens once; at 4.3 TB/s (one H200, measured) that is the floor of the
// step's time. "roofline" is that floor summed over the steps the decoder ran (rows it really
// computed, spans it really attended) over the measured decode time (generation minus the
// prompt's forward pass, which is compute-bound and reported apart). "live" counts only the
// live rows' real tokens (each row's own prompt, its steps until its stop), as
// postprocess/iteration_table.py does: padding and finished rows read are waste there. The
// greedy tokens with graphs must equal those without: the program exits 1 otherwise.
#include <torch/cuda.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "graph_timing.hpp"
#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/kernel_switch.hpp"
#include "quartet/core/kernels_config.hpp"
#include "quartet/core/profile.hpp"
#include "quartet/dist/device_memory.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/transformer.hpp"

using namespace quartet;

namespace {

constexpr double kHbmBytesPerS = 4.3e12;  // one H200, measured (developers' guide)

struct Args {
  std::string config = "inputs/models/llama-886m/config.json";
  int64_t batch = 64, prompt = 128, new_tokens = 128, reps = 3;
  int64_t prompt_min = 0, samples = 1, stops = 400;  // 0: every prompt --prompt tokens
  int64_t decode_rows = 0, kv_block = 16;            // --decode-rows R: the paged rows too
  bool paged_only = false;                           // --paged-only 1: no contiguous row
  std::string dtype = "bf16";
  bool profile = false;
  bool attention_only = false;  // --attention-only 1: the attention table alone
  std::vector<std::string> overrides;  // --set section.key=value: deck keys ([kernels])
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void sync(const torch::Device& d) {
  synchronize_device(d);
}

// Microseconds per call of f: 5 warm-up calls, then the mean of `calls` back to back.
double time_us(const torch::Device& dev, const std::function<void()>& f, int calls) {
  for (int i = 0; i < 5; ++i) f();
  synchronize_device(dev);
  const double t0 = now();
  for (int i = 0; i < calls; ++i) f();
  synchronize_device(dev);
  return (now() - t0) / calls * 1e6;
}

struct Run {
  Generation g;
  double seconds = 0;
};

// The LM head's product for a decoding step's rows, [rows, hidden] x [vocab, hidden]^T, three
// ways: cuBLAS as torch::linear calls it, the transposed problem (W x^T), and cuBLASLt's
// bias epilogue (addmm with a zero bias). The weight read alone bounds it from below.
void head_gemms(Transformer& model, int64_t batch, const torch::Device& dev) {
  const auto params = model->named_parameters(true);
  torch::Tensor w = params.contains("lm_head.weight") ? params["lm_head.weight"] : model->parameters().front();
  const auto zero_bias = torch::zeros({w.size(0)}, w.options());
  std::printf("\nLM head product, weight [%lld, %lld] (%.0f MB, floor %.1f us at 4.3 TB/s)\n", (long long)w.size(0),
              (long long)w.size(1), w.numel() * w.element_size() / 1e6, w.numel() * w.element_size() / kHbmBytesPerS * 1e6);
  std::printf("| rows | linear us | W x^T us | addmm(Lt) us |\n|-----:|----------:|---------:|-------------:|\n");
  torch::NoGradGuard no_grad;
  for (int64_t rows : {int64_t{8}, int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128}}) {
    if (rows > 2 * batch) break;
    auto x = torch::randn({rows, w.size(1)}, w.options());
    const double a = time_us(dev, [&] { torch::linear(x, w); }, 50);
    const double b = time_us(dev, [&] { torch::mm(w, x.t()); }, 50);
    const double c = time_us(dev, [&] { torch::addmm(zero_bias, x, w.t()); }, 50);
    std::printf("| %4lld | %9.1f | %8.1f | %12.1f |\n", (long long)rows, a, b, c);
  }
}

// One decoding step's attention for one layer over `span` cached slots, [batch] rows: ATen's
// three kernels (baddbmm with the mask, float32 softmax, bmm) against quartet's kernel (heads of
// 128 in bfloat16, in registers), split over the span (flash decoding) and not. Bytes: the keys
// and values read, against 4.3 TB/s. Timed as CUDA graph replays, as decoding runs them.
void attention_table(const ModelConfig& cfg, int64_t batch, torch::Dtype dtype, const torch::Device& dev) {
#ifdef QUARTET_WITH_CUDA
  if (!decode_kernels_enabled() || !dev.is_cuda()) return;
  const int64_t nkv = cfg.num_kv_heads, g = cfg.num_heads / cfg.num_kv_heads, hd = cfg.head_dim;
  if (!attend_decode_supports(dtype, g, hd)) return;
  std::printf("\nDecode attention, one layer: %lld rows, %lld KV heads x %lld query heads each, head %lld\n",
              (long long)batch, (long long)nkv, (long long)g, (long long)hd);
  // Columns: ATen; quartet's kernel with its defaults; unsplit.
  std::printf("| span | MB read | floor us | ATen us | quartet us | TB/s | 1 split us |\n");
  std::printf("|-----:|--------:|---------:|--------:|-----------:|-----:|-----------:|\n");
  torch::NoGradGuard no_grad;
  const auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t span : {int64_t{128}, int64_t{256}, int64_t{512}, int64_t{1024}}) {
    auto kc = torch::randn({batch, nkv, span, hd}, opts), vc = torch::randn({batch, nkv, span, hd}, opts);
    auto q = torch::randn({batch, nkv * g, hd}, opts);
    auto bias = torch::zeros({batch * nkv, g, span}, opts);
    const double aten = bench::graph_us([&](int) {
      auto scores = at::baddbmm(bias, q.view({batch * nkv, g, hd}), kc.view({batch * nkv, span, hd}).transpose(1, 2),
                                1.0, scale);
      at::bmm(scores.softmax(-1), vc.view({batch * nkv, span, hd}));
    }, 100);
    const double ours = bench::graph_us([&](int) { attend_decode(q, kc, vc, bias, span, scale); }, 100);
    const double one = bench::graph_us([&](int) { attend_decode(q, kc, vc, bias, span, scale, 1); }, 100);
    const double bytes = 2.0 * static_cast<double>(kc.numel()) * kc.element_size();
    std::printf("| %4lld | %7.1f | %8.1f | %7.1f | %10.1f | %4.2f | %10.1f |\n", (long long)span, bytes / 1e6,
                bytes / kHbmBytesPerS * 1e6, aten, ours, bytes / (ours * 1e-6) / 1e12, one);
  }
#else
  (void)cfg, (void)batch, (void)dtype, (void)dev;
#endif
}

// The fastest of `reps` runs (after one warm-up run).
Run timed(Transformer& model, const torch::Tensor& ids, const torch::Tensor& mask, const SamplingParams& p,
          int64_t reps) {
  const auto dev = ids.device();
  generate(model, ids, mask, p);
  Run best;
  for (int64_t r = 0; r < reps; ++r) {
    sync(dev);
    const double t0 = now();
    auto g = generate(model, ids, mask, p);
    sync(dev);
    const double s = now() - t0;
    if (r == 0 || s < best.seconds) best = Run{g, s};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") a.config = v;
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--prompt") a.prompt = std::stoll(v);
    else if (k == "--prompt-min") a.prompt_min = std::stoll(v);
    else if (k == "--samples") a.samples = std::stoll(v);
    else if (k == "--stops") a.stops = std::stoll(v);
    else if (k == "--decode-rows") a.decode_rows = std::stoll(v);
    else if (k == "--kv-block") a.kv_block = std::stoll(v);
    else if (k == "--paged-only") a.paged_only = v == "1";
    else if (k == "--new") a.new_tokens = std::stoll(v);
    else if (k == "--reps") a.reps = std::stoll(v);
    else if (k == "--dtype") a.dtype = v;
    else if (k == "--profile") a.profile = v == "1";
    else if (k == "--attention-only") a.attention_only = v == "1";
    else if (k == "--set") a.overrides.push_back(v);
    else {
      std::fprintf(stderr, "generate_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  // The kernels as a deck with these overrides would switch them.
  use_kernels(kernels_section().load(Deck("generate_bench --set", "", a.overrides, deck_schema())));
  const torch::Device dev = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const auto dtype = a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  torch::manual_seed(1);
  auto cfg = ModelConfig::from_json_file(a.config);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as printed, even into a log that a crash ends
  if (a.attention_only) {
    attention_table(cfg, a.batch, dtype, dev);
    return 0;
  }
  Transformer model(cfg, Head::causal_lm, torch::TensorOptions().dtype(dtype).device(dev), true);
  model->eval();
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  const double elt = dtype == torch::kBFloat16 ? 2.0 : 4.0;
  const double weight_bytes = static_cast<double>(params) * elt;
  // Keys and values of one cached token, all layers.
  const double kv_token_bytes = 2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * elt;

  if (a.samples < 1 || a.batch % a.samples != 0 || a.prompt_min > a.prompt) {
    std::fprintf(stderr, "generate_bench: --samples must divide --batch, and --prompt-min be at most --prompt\n");
    return 2;
  }
  // batch / samples prompts of random ids, each `samples` times side by side.
  std::vector<std::vector<int64_t>> prompts;
  {
    auto gen = at::detail::createCPUGenerator(11);
    const int64_t lo = a.prompt_min > 0 ? a.prompt_min : a.prompt;
    for (int64_t i = 0; i < a.batch / a.samples; ++i) {
      const int64_t n = torch::randint(lo, a.prompt + 1, {1}, gen).item<int64_t>();
      auto t = torch::randint(1, cfg.vocab_size, {n}, gen, torch::kLong);
      std::vector<int64_t> ids(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
      for (int64_t k = 0; k < a.samples; ++k) prompts.push_back(ids);
    }
  }
  auto [cpu_ids, cpu_mask] = left_pad(prompts, 0);
  auto ids = cpu_ids.to(dev), mask = cpu_mask.to(dev);
  const auto prompt_lengths = cpu_mask.sum(1);  // [batch], real tokens
  const int64_t T = ids.size(1);                // the padded prompt width
  std::printf("generate_bench: %s, %.1fM parameters, %s, %s; batch %lld (%lld a prompt), prompts of %lld-%lld "
              "tokens (mean %.0f), %lld new tokens\n",
              a.config.c_str(), params / 1e6, a.dtype.c_str(), dev.str().c_str(), (long long)a.batch,
              (long long)a.samples, (long long)(a.prompt_min > 0 ? a.prompt_min : a.prompt), (long long)a.prompt,
              prompt_lengths.to(torch::kDouble).mean().item<double>(), (long long)a.new_tokens);

  // The prompt's forward pass and the first token alone, to split it off.
  SamplingParams p;
  p.temperature = 0.0;
  p.max_new_tokens = 1;
  p.prompt_group = a.samples;
  const double prefill_s = timed(model, ids, mask, p, a.reps).seconds;

  struct Row {
    std::string name;
    SamplingParams params;
  };
  std::vector<Row> rows;
  p.max_new_tokens = a.new_tokens;
  p.cuda_graphs = false;
  rows.push_back({"greedy, eager (no graphs)", p});
  p.cuda_graphs = true;
  rows.push_back({"greedy, CUDA graphs", p});
  SamplingParams ppo = p;  // PPO's sampling: T = 1, nothing cut
  ppo.temperature = 1.0;
  ppo.seed = 7;
  rows.push_back({"sampled T=1 (PPO's), graphs", ppo});
  p.temperature = 1.0;
  p.top_p = 0.95;
  p.seed = 7;
  rows.push_back({"sampled T=1 top-p .95, graphs", p});
  // Rows that stop: 400 ids out of the vocabulary end a sequence, about 1.2% a step with the
  // random model's near-uniform distribution, so rows finish throughout and the batch shrinks.
  for (int64_t i = 0; i < a.stops; ++i) p.stop_ids.push_back(100 + i * (cfg.vocab_size - 200) / a.stops);
  p.top_p = 1.0;  // plain sampling here; top-p with stops is the next row
  rows.push_back({"sampled, " + std::to_string(a.stops) + " stop ids, graphs", p});
  SamplingParams top_p_stops = p;
  top_p_stops.top_p = 0.95;
  rows.push_back({"top-p .95, " + std::to_string(a.stops) + " stop ids, graphs", top_p_stops});
  const size_t contiguous_rows = rows.size();
  if (a.decode_rows > 0)
    for (size_t i : {size_t{1}, size_t{4}, size_t{5}}) {
      Row paged = rows[i];
      paged.params.decode_rows = a.decode_rows;
      paged.params.kv_block = a.kv_block;
      paged.name = "paged " + std::to_string(a.decode_rows) + ": " + paged.name.substr(0, paged.name.find(", graphs"));
      rows.push_back(paged);
    }
  if (a.paged_only && a.decode_rows > 0) rows.erase(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(contiguous_rows));
  const size_t first_paged = a.paged_only ? 0 : contiguous_rows;

  std::printf("\nprompt forward (+1 token): %.1f ms\n\n", prefill_s * 1e3);
  std::printf("| %-34s | total ms | decode ms | ms/step | new tok/s | graphs | shrinks | roofline |   live |\n", "run");
  // (A paged row's "shrinks" column counts refills: sequences that took a finished one's row.)
  std::printf("|%s|---------:|----------:|--------:|----------:|-------:|--------:|---------:|-------:|\n",
              std::string(36, '-').c_str());
  // One table row; `note` replaces the roofline column.
  auto print_row = [&](const std::string& name, const Run& r, const std::string& note) {
    const auto& st = r.g.stats;
    const int64_t new_tokens = r.g.new_lengths.sum().item<int64_t>();
    // The floor: every step reads the weights and its rows' cached keys and values (with the
    // shrinking batch, the rows it computed; each attends to T + k slots at step k).
    const double steps = static_cast<double>(st.steps);
    const double avg_rows = steps > 0 ? static_cast<double>(st.row_steps) / steps : 0;
    double kv = 0;
    for (int64_t k = 1; k <= st.steps; ++k) kv += avg_rows * static_cast<double>(T + k) * kv_token_bytes;
    const double floor_s = (steps * weight_bytes + kv) / kHbmBytesPerS;
    // Live: row r's step k (1 .. n_r - 1, the prompt's pass gave its first token) reads its own
    // p_r + k tokens.
    const auto later = (r.g.new_lengths.to(torch::kCPU, torch::kDouble) - 1).clamp_min(0);
    const auto p_r = prompt_lengths.to(torch::kDouble);
    const double live_kv = (later * p_r + later * (later + 1) / 2).sum().item<double>() * kv_token_bytes;
    const double live_s = (steps * weight_bytes + live_kv) / kHbmBytesPerS;
    const double decode_s = std::max(1e-9, r.seconds - prefill_s);
    char roof[32], live[32];
    // A paged run reads only the live rows' tokens: its floor is the live one.
    std::snprintf(roof, sizeof roof, "%7.1f%%", 100.0 * (st.pool_blocks > 0 ? live_s : floor_s) / decode_s);
    std::snprintf(live, sizeof live, "%5.1f%%", 100.0 * live_s / decode_s);
    std::printf("| %-34s | %8.1f | %9.1f | %7.3f | %9.0f | %6lld | %7lld | %8s | %6s |\n", name.c_str(), r.seconds * 1e3,
                decode_s * 1e3, steps > 0 ? decode_s * 1e3 / steps : 0.0, new_tokens / r.seconds,
                (long long)st.graphs_captured, (long long)(st.pool_blocks > 0 ? st.refills : st.compactions), note.empty() ? roof : note.c_str(),
                note.empty() ? live : "");
  };
  torch::Tensor eager_tokens;
  std::vector<torch::Tensor> row_tokens;
  bool equal = true;
  for (const auto& row : rows) {
    Run r = timed(model, ids, mask, row.params, a.reps);
    print_row(row.name, r, "");
    row_tokens.push_back(r.g.tokens);
    if (row.name.rfind("greedy, eager", 0) == 0) eager_tokens = r.g.tokens;
    if (row.name.rfind("greedy, CUDA", 0) == 0) equal = torch::equal(eager_tokens, r.g.tokens);
  }
  if (a.decode_rows > 0 && !a.paged_only) {
    // bf16 greedy paths part after a near-tie where two kernels sum in different orders.
    const auto news = [&](const torch::Tensor& t) { return t.slice(1, T); };
    const auto& paged = row_tokens[first_paged];
    const int64_t w = std::min(news(paged).size(1), news(row_tokens[1]).size(1));
    std::printf("paged greedy tokens equal to the contiguous decoder's: %.1f%% of new tokens\n",
                100.0 * news(paged).narrow(1, 0, w).eq(news(row_tokens[1]).narrow(1, 0, w)).to(torch::kDouble).mean().item<double>());
  }
  // Greedy and PPO's sampling on ATen operations alone (no quartet kernel), for the kernels'
  // share; the note is the fraction of new tokens that agree with the kernels' run (in bf16 the
  // kernels round differently, so greedy paths may part after a near-tie).
  if (decode_kernels_enabled() && dev.is_cuda() && !a.paged_only) {
    for (size_t i : {size_t{1}, size_t{2}}) {
      set_decode_kernels(false);
      Run r = timed(model, ids, mask, rows[i].params, a.reps);
      set_decode_kernels(true);
      const auto news = [&](const torch::Tensor& t) { return t.slice(1, T); };
      char note[32];
      std::snprintf(note, sizeof note, "%.0f%% same",
                    100.0 * news(r.g.tokens).eq(news(row_tokens[i])).to(torch::kDouble).mean().item<double>());
      print_row(rows[i].name.substr(0, rows[i].name.find(',')) + ", graphs, no quartet kernel", r, note);
    }
  }
  // Greedy with ATen's attention products where quartet's attention kernel takes this model's
  // decoding steps (kernels.decode_attention's A/B).
  if (decode_kernels_enabled() && dev.is_cuda() && !a.paged_only &&
      decode_attention_uses_kernel(dtype, cfg.num_heads / cfg.num_kv_heads, cfg.head_dim)) {
    set_decode_attention(false);
    print_row("greedy, graphs, ATen attention", timed(model, ids, mask, rows[1].params, a.reps), " ");
    set_decode_attention(true);
  }
  // The same greedy run with every parameter in its own buffer: the decoding step then
  // multiplies q, k, v, gate and up one by one (the unfused path), for the fusion's share.
  if (!a.paged_only) {
    Transformer loose(cfg, Head::causal_lm, torch::TensorOptions().dtype(dtype).device(dev), false);
    {
      torch::NoGradGuard no_grad;
      auto src = model->parameters(true);
      auto dst = loose->parameters(true);
      for (size_t i = 0; i < dst.size(); ++i) dst[i].set_data(src[i].clone());
    }
    loose->eval();
    print_row("greedy, graphs, unfused q/k/v", timed(loose, ids, mask, rows[1].params, a.reps), " ");
  }
  if (dev.is_cuda()) head_gemms(model, a.batch, dev);
  attention_table(cfg, a.batch, dtype, dev);
  std::printf("\nweights %.2f GB/step, KV cache %.1f KB per token; peak device memory %.2f GiB\n",
              weight_bytes / 1e9, kv_token_bytes / 1e3, device_memory(dev).peak_allocated / double(1 << 30));
  std::printf("greedy tokens with CUDA graphs equal those without: %s\n", equal ? "yes" : "NO");
  if (a.profile) {
    for (bool graphs : {true, false}) {
      if (a.paged_only && !graphs) continue;
      SamplingParams q = rows[a.paged_only ? 0 : graphs ? 1 : 0].params;
      KernelProfile prof;
      synchronize_device(dev);
      prof.start();
      generate(model, ids, mask, q);
      synchronize_device(dev);
      std::printf("\n%s", prof.stop(graphs ? "greedy generation, CUDA graphs" : "greedy generation, eager", "", 25).c_str());
    }
  }
  return equal ? 0 : 1;
}
