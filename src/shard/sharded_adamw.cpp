#include "quartet/shard/sharded_adamw.hpp"

#include <optional>

#include <torch/types.h>

#include <cmath>
#include <map>

#include "quartet/core/check.hpp"
#include "quartet/shard/adamw_kernel.hpp"

namespace quartet {

namespace {

torch::Tensor state_empty(int64_t n, torch::Device device, bool host) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  if (host) return torch::zeros({n}, device.is_cuda() ? opts.pinned_memory(true) : opts);
  return torch::zeros({n}, opts.device(device));
}

}  // namespace

ShardedAdamW::ShardedAdamW(ShardedModel& model, const AdamWOptions& options) : model_(model), options_(options) {
  QUARTET_CHECK(model.options().trainable, "ShardedAdamW: the model is frozen (no gradients)");
  const auto& layout = model.layout();
  const auto& shards = model.param_shards();
  const bool host = options.offload && model.device().is_cuda();
  // A float32 model whose parameter shards sit where the optimizer state does needs no
  // separate master copy.
  own_master_ = model.options().dtype != torch::kFloat32 || options.offload || model.options().offload_params;
  torch::NoGradGuard no_grad;
  const int64_t rank = model.group().rank();
  for (size_t u = 0; u < layout.size(); ++u) {
    const int64_t n = layout[u].shard;
    if (own_master_) {
      master_.push_back(state_empty(n, model.device(), host));
      master_.back().copy_(shards[u]);
    } else {
      master_.push_back(shards[u]);
    }
    exp_avg_.push_back(state_empty(n, model.device(), host));
    exp_avg_sq_.push_back(state_empty(n, model.device(), host));
    if (host) grad_host_.push_back(state_empty(n, model.device(), true));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    const int64_t begin = rank * n, end = begin + n;
    for (const auto& p : layout[u].params) {
      if (!p.decay) continue;
      int64_t lo = 0, hi = 0;
      UnitLayout::overlap(p, begin, end, &lo, &hi);
      if (lo >= hi) continue;
      if (!ranges.empty() && ranges.back().first + ranges.back().second == lo - begin) ranges.back().second += hi - lo;
      else ranges.emplace_back(lo - begin, hi - lo);  // adjacent decayed parameters make one range
    }
    decay_.push_back(std::move(ranges));
  }
}

double ShardedAdamW::step(double lr) {
  const double norm = step_async(lr).item<double>();
  QUARTET_CHECK(std::isfinite(norm), "ShardedAdamW: the gradient norm is " + std::to_string(norm) +
                                         " on group '" + model_.group().group_name() + "' (step " +
                                         std::to_string(steps_) + "): the loss diverged");
  return norm;
}

torch::Tensor ShardedAdamW::step_async(double lr) {
  torch::NoGradGuard no_grad;
  auto& shards = model_.param_shards();
  // One rank with quartet's kernel: the gradients are read where autograd left them.
  const bool kernel = use_kernel(shards);
  const auto* returned = kernel ? model_.gradients_as_returned() : nullptr;
  std::vector<torch::Tensor> grads, norm_of;  // the float32 shards, or what the norm reads
  if (returned) {
    for (const auto& unit : *returned)
      for (const auto& g : unit)
        if (g.defined()) norm_of.push_back(g);
  } else {
    grads = model_.grad_shards();
    norm_of = grads;
  }

  // Global norm: every element of the model sits in exactly one rank's shard. Float32 norms
  // also of bfloat16 gradients (the default would round each to bfloat16).
  // With quartet's kernel, its sum of squares over all of them (adamw_kernel.hpp).
  auto sq = kernel           ? grad_sq_norm_many(norm_of, shards.front().device())
            : norm_of.empty() ? torch::zeros({1}, shards.front().options().dtype(torch::kFloat32))
                              : torch::stack(at::_foreach_norm(norm_of, 2, torch::kFloat32)).pow(2).sum().view({1});
  model_.group().all_reduce(sq, ReduceOp::sum);
  auto norm = sq.sqrt().squeeze(0);  // 0-d (view({}) would pick the dtype overload)
  // Clipping as the fused kernel's grad_scale, which divides: max(1, norm / max_norm).
  std::optional<torch::Tensor> grad_scale, found_inf;
  const auto state_device = master_.front().device();
  if (options_.max_grad_norm > 0)
    grad_scale = ((norm + 1e-6) / options_.max_grad_norm).clamp_min(1.0).to(state_device);
  found_inf = norm.isfinite().logical_not().to(torch::kFloat32).to(state_device);

  ++steps_;
  AdamWStep hyper{lr, options_.beta1, options_.beta2, options_.eps, 0.0, steps_};
  const torch::Tensor scale = grad_scale ? *grad_scale : torch::Tensor();
  if (returned) {
    // A stretch per parameter, each reading its own gradient (or none: zero), in a few launches.
    const auto& layout = model_.layout();
    std::vector<AdamWStretch> stretches;
    for (size_t u = 0; u < layout.size(); ++u) {
      const torch::Tensor model_shard = own_master_ ? shards[u] : torch::Tensor();
      for (size_t k = 0; k < layout[u].params.size(); ++k) {
        const FlatParam& p = layout[u].params[k];
        if (p.numel == 0) continue;
        const torch::Tensor g = (*returned)[u].empty() ? torch::Tensor() : (*returned)[u][k];
        stretches.push_back({master_[u], g, exp_avg_[u], exp_avg_sq_[u], model_shard, p.offset, p.numel,
                             p.decay ? options_.weight_decay : 0.0});
      }
    }
    adamw_step_many(stretches, hyper, scale, *found_inf);
    return norm;
  }
  // Device-resident state: quartet's kernel (adamw_kernel.hpp). Otherwise decoupled weight
  // decay first (AdamW's order), on the decayed ranges only; then ATen's fused kernel for every
  // unit: moments, bias correction, update and the clipping factor (as its grad_scale, which
  // divides) in one pass over the shards; then the masters cast into the model's shards.
  if (kernel) {
    // One pass per stretch of equal decay (one per unit without decay), the model's bfloat16
    // shard written in the same pass.
    for (size_t u = 0; u < grads.size(); ++u) {
      const torch::Tensor model_shard = own_master_ ? shards[u] : torch::Tensor();
      int64_t at = 0;
      auto stretch = [&](int64_t begin, int64_t count, double decay) {
        hyper.weight_decay = decay;
        if (count > 0) adamw_step(master_[u], grads[u], exp_avg_[u], exp_avg_sq_[u], model_shard, begin, count, hyper,
                                  scale, *found_inf);
      };
      for (const auto& [begin, count] : decay_[u]) {
        stretch(at, begin - at, 0.0);
        stretch(begin, count, options_.weight_decay);
        at = begin + count;
      }
      stretch(at, master_[u].numel() - at, 0.0);
    }
    return norm;
  }
  if (options_.weight_decay != 0)
    for (size_t u = 0; u < grads.size(); ++u)
      for (const auto& [begin, count] : decay_[u]) master_[u].narrow(0, begin, count).mul_(1 - lr * options_.weight_decay);
  std::vector<torch::Tensor> g_list;
  for (size_t u = 0; u < grads.size(); ++u) {
    if (grad_host_.empty()) {
      g_list.push_back(grads[u]);
    } else {
      grad_host_[u].copy_(grads[u]);  // device -> pinned host; the CPU does the step
      g_list.push_back(grad_host_[u]);
    }
  }
  // The kernel reads the step count (for the bias corrections) from a tensor per unit; they
  // all share one.
  if (!step_count_.defined()) step_count_ = torch::zeros({}, master_.front().options().dtype(torch::kFloat32));
  step_count_.fill_(static_cast<double>(steps_));
  const std::vector<torch::Tensor> step_counts(master_.size(), step_count_);
  at::_fused_adamw_(master_, g_list, exp_avg_, exp_avg_sq_, {}, step_counts, lr, options_.beta1, options_.beta2,
                    /*weight_decay=*/0.0, options_.eps, /*amsgrad=*/false, /*maximize=*/false, grad_scale, found_inf);
  // Blocking when the master is in host memory: the next CPU step must not overwrite it mid-copy.
  if (own_master_)
    for (size_t u = 0; u < shards.size(); ++u) shards[u].copy_(master_[u]);
  return norm;
}

bool ShardedAdamW::use_kernel(const std::vector<torch::Tensor>& shards) const {
  if (!grad_host_.empty()) return false;
  for (size_t u = 0; u < master_.size(); ++u)
    if (!adamw_kernel_supports(master_[u], own_master_ ? shards[u] : torch::Tensor())) return false;
  return true;
}

NamedTensors ShardedAdamW::full_state() {
  torch::NoGradGuard no_grad;
  const auto& layout = model_.layout();
  Collectives& group = model_.group();
  NamedTensors out;
  const char* suffix[] = {".master", ".exp_avg", ".exp_avg_sq"};
  std::vector<torch::Tensor>* parts[] = {&master_, &exp_avg_, &exp_avg_sq_};
  for (size_t u = 0; u < layout.size(); ++u) {
    for (int k = 0; k < 3; ++k) {
      auto local = (*parts[k])[u].to(model_.device(), torch::kFloat32).contiguous();
      auto full = torch::empty({layout[u].padded}, local.options());
      group.all_gather(local, full);
      full = full.to(torch::kCPU);
      for (const auto& p : layout[u].params)
        out.emplace_back(p.name + suffix[k], full.narrow(0, p.offset, p.numel).view(p.shape).clone());
    }
  }
  return out;
}

void ShardedAdamW::load_full_state(const NamedTensors& state, int64_t steps) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  const auto& layout = model_.layout();
  const int64_t rank = model_.group().rank();
  const char* suffix[] = {".master", ".exp_avg", ".exp_avg_sq"};
  std::vector<torch::Tensor>* parts[] = {&master_, &exp_avg_, &exp_avg_sq_};
  for (size_t u = 0; u < layout.size(); ++u) {
    const int64_t n = layout[u].shard, begin = rank * n, end = begin + n;
    for (int k = 0; k < 3; ++k) {
      auto& dst = (*parts[k])[u];
      for (const auto& p : layout[u].params) {
        const std::string name = p.name + suffix[k];
        auto it = by_name.find(name);
        QUARTET_CHECK(it != by_name.end(), "optimizer state: tensor '" + name + "' is missing");
        QUARTET_CHECK(it->second.sizes().vec() == p.shape, "optimizer state: tensor '" + name + "' has shape " +
                                                              c10::str(it->second.sizes()) + ", the model expects " +
                                                              c10::str(c10::IntArrayRef(p.shape)));
        int64_t lo = 0, hi = 0;
        UnitLayout::overlap(p, begin, end, &lo, &hi);
        if (lo < hi) dst.narrow(0, lo - begin, hi - lo).copy_(it->second.reshape({-1}).narrow(0, lo - p.offset, hi - lo));
      }
    }
    if (own_master_) model_.param_shards()[u].copy_(master_[u]);
  }
  steps_ = steps;
}

void ShardedAdamW::load_sliced(const ParamSource& master, const ParamSource& exp_avg, const ParamSource& exp_avg_sq,
                               int64_t steps) {
  torch::NoGradGuard no_grad;
  const auto& layout = model_.layout();
  const int rank = model_.group().rank();
  const ParamSource* sources[] = {&master, &exp_avg, &exp_avg_sq};
  std::vector<torch::Tensor>* parts[] = {&master_, &exp_avg_, &exp_avg_sq_};
  for (const ParamSource* s : sources) probe_source(layout, *s);
  for (size_t u = 0; u < layout.size(); ++u) {
    // Without an own master, master_[u] is the parameter shard itself: filling it loads the model.
    for (int k = 0; k < 3; ++k) fill_shard(layout[u], rank, *sources[k], (*parts[k])[u]);
    if (own_master_) model_.param_shards()[u].copy_(master_[u]);
  }
  steps_ = steps;
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t n = 0;
  for (size_t u = 0; u < exp_avg_.size(); ++u) n += exp_avg_[u].numel() * 2 + (own_master_ ? master_[u].numel() : 0);
  return n * 4;
}

}  // namespace quartet
