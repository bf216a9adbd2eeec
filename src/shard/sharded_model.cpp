#include "quartet/shard/sharded_model.hpp"

#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/types.h>

#include <functional>
#include <map>

#include "quartet/core/check.hpp"
#include "quartet/shard/adamw_kernel.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace quartet {

namespace {

// The full buffers' memory comes and goes while the parameter views on them stay: the storage
// is emptied and refilled in place (what FSDP does with untyped_storage().resize_()).
void release_storage(const torch::Tensor& t) { t.storage().unsafeGetStorageImpl()->reset(); }

void allocate_storage(const torch::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (impl->data() != nullptr && impl->nbytes() == bytes) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

// Host memory for offloaded shards: pinned when there is a GPU, so copies overlap compute.
torch::Tensor host_empty(int64_t n, torch::ScalarType dtype, torch::Device device) {
  auto opts = torch::TensorOptions().dtype(dtype);
  if (device.is_cuda()) opts = opts.pinned_memory(true);
  return torch::empty({n}, opts);
}

}  // namespace

// ---- parameter sources ------------------------------------------------------------------

ParamSource source_from_state(const NamedTensors& state) {
  auto by_name = std::make_shared<std::map<std::string, torch::Tensor>>();
  for (const auto& [name, t] : state) (*by_name)[name] = t;
  return [by_name](const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                   int64_t count) {
    auto it = by_name->find(name);
    QUARTET_CHECK(it != by_name->end(), "sharding: no tensor '" + name + "' in the given state");
    QUARTET_CHECK(it->second.sizes().vec() == shape,
                  "sharding: tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                      ", the model expects " + c10::str(c10::IntArrayRef(shape)));
    return it->second.reshape({-1}).narrow(0, begin, count);
  };
}

ParamSource source_from_checkpoint(std::shared_ptr<SafetensorsCheckpoint> ckpt, const ModelConfig& config,
                                   Head head, HeadSource head_source, ParamSource fresh, WeightMap* map_out) {
  // Checked in full here, before the model is built: the rules Transformer::load_hf uses.
  auto map = std::make_shared<WeightMap>(map_weights(*ckpt, config, head, head_source));
  QUARTET_CHECK(map->fresh.empty() || fresh, ckpt->dir() + ": " + map->note() + ", but no fresh values were given");
  if (map_out) *map_out = *map;
  return [ckpt, map, fresh](const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                            int64_t count) {
    auto it = map->source.find(name);
    if (it == map->source.end()) {
      QUARTET_CHECK(std::find(map->fresh.begin(), map->fresh.end(), name) != map->fresh.end(),
                    ckpt->dir() + ": the model asks for '" + name + "', which the weight map does not know");
      return fresh(name, shape, begin, count);
    }
    if (count == 0) return torch::empty({0});  // names, shapes and dtypes are checked already
    torch::Tensor part = ckpt->get(it->second).reshape({-1}).narrow(0, begin, count);
    check_finite_weights(*ckpt, it->second, part);
    return part;
  };
}

ParamSource source_random(const ModelConfig& config, std::uint64_t seed, torch::Device device) {
  const double std = config.initializer_range;
  const int64_t pad = config.family == Family::llama && config.pad_token_id && *config.pad_token_id >= 0 &&
                              *config.pad_token_id < config.vocab_size
                          ? *config.pad_token_id
                          : -1;
  return [std, pad, seed, device](const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                                  int64_t count) {
    if (count == 0) return torch::empty({0});  // a shape check: nothing to draw
    auto t = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (shape.size() == 1) {
      t.fill_(bias ? 0.0 : 1.0);  // norm weights 1, biases 0
    } else {
      // One generator per parameter, seeded from the run seed and the name: every rank draws
      // the same values whatever the order in which it asks.
#ifdef QUARTET_WITH_CUDA
      auto gen = device.is_cuda() ? at::cuda::detail::createCUDAGenerator(device.index())
                                  : at::detail::createCPUGenerator();
#else
      auto gen = at::detail::createCPUGenerator();
#endif
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_current_seed(seed * 1000003u + std::hash<std::string>{}(name));
      }
      t.normal_(0.0, std, gen);
      if (pad >= 0 && name.find("embed_tokens") != std::string::npos) t[pad].zero_();
    }
    return t.reshape({-1}).narrow(0, begin, count);
  };
}

// ---- the block runner ---------------------------------------------------------------------

struct ShardedModel::Internals {
  static torch::Tensor run_block(ShardedModel& m, int64_t layer, const TransformerImpl::BlockFn& fn,
                                 const torch::Tensor& x) {
    return m.run_block(layer, fn, x);
  }
};

namespace {

// What one block's autograd node needs in backward: the engine and the block's function.
struct BlockCall : torch::CustomClassHolder {
  BlockCall(std::function<void(int64_t)> enter, std::function<void(int64_t, const std::vector<torch::Tensor>&)> leave,
            std::function<std::vector<torch::Tensor>(int64_t)> params, TransformerImpl::BlockFn fn, int64_t layer,
            bool recompute)
      : enter_backward(std::move(enter)), finish_backward(std::move(leave)), params_of(std::move(params)),
        fn(std::move(fn)), layer(layer), recompute(recompute) {}
  std::function<void(int64_t)> enter_backward;
  std::function<void(int64_t, const std::vector<torch::Tensor>&)> finish_backward;
  std::function<std::vector<torch::Tensor>(int64_t)> params_of;
  TransformerImpl::BlockFn fn;
  int64_t layer;
  bool recompute;
  torch::Tensor input, output;  // the block's own graph (kept when not recomputing)
};

// One sharded block as a single autograd node. Its forward runs the block on the gathered
// parameters; its backward gathers them again, back-propagates through the block's own graph
// (recomputed first under activation checkpointing) and hands the parameter gradients to the
// engine, which reduce-scatters them; only the input gradient flows on.
struct ShardedBlock : torch::autograd::Function<ShardedBlock> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                c10::intrusive_ptr<BlockCall> call) {
    torch::Tensor y;
    if (call->recompute) {
      y = call->fn(x);  // apply() runs forward with grad off: no activations kept
      call->input = x.detach();
    } else {
      torch::AutoGradMode grad_on(true);
      call->input = x.detach().requires_grad_(true);
      call->output = call->fn(call->input);
      y = call->output.detach();
    }
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto call = c10::static_intrusive_pointer_cast<BlockCall>(ctx->saved_data["call"].toCapsule());
    call->enter_backward(call->layer);
    torch::Tensor x = call->input, y = call->output;
    if (call->recompute) {
      torch::AutoGradMode grad_on(true);
      x = x.requires_grad_(true);
      y = call->fn(x);
    }
    std::vector<torch::Tensor> targets{x};
    auto params = call->params_of(call->layer);
    targets.insert(targets.end(), params.begin(), params.end());
    auto grads = torch::autograd::grad({y}, targets, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    call->input = torch::Tensor();
    call->output = torch::Tensor();
    std::vector<torch::Tensor> param_grads(grads.begin() + 1, grads.end());
    call->finish_backward(call->layer, param_grads);
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

// ---- the engine -----------------------------------------------------------------------------

ShardedModel::ShardedModel(const ModelConfig& config, Head head, Collectives& group, const ShardOptions& options,
                           const ParamSource& source)
    : group_(group), options_(options), device_(group.device()) {
  // The module is built uninitialised on the CPU (untouched pages cost no memory; set_data
  // cannot move a meta tensor onto a real device) and its parameters become views into the
  // full buffers below.
  model_ = Transformer(config, head, torch::TensorOptions().dtype(options.dtype), false);
  const int W = group.size(), r = group.rank();
  layout_ = make_flat_layout(model_, W);
  resident_ = W == 1 && !options.offload_params;

  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : model_->named_parameters(true)) by_name[item.key()] = item.value();
  const auto dev_opts = torch::TensorOptions().dtype(options.dtype).device(device_);
  const size_t n = layout_.size();
  params_.resize(n);
  full_.resize(n);
  shards_.resize(n);
  state_.assign(n, State::freed);
  gathers_.resize(n);
  grad_fresh_.assign(n, true);
  torch::NoGradGuard no_grad;
  probe_source(layout_, source);  // names and shapes checked on every rank before any slice is read
  for (size_t u = 0; u < n; ++u) {
    const UnitLayout& L = layout_[u];
    full_[u] = torch::empty({L.padded}, dev_opts);
    for (const auto& p : L.params) {
      torch::Tensor param = by_name.at(p.name);
      param.set_data(full_[u].narrow(0, p.offset, p.numel).view(p.shape));
      param.set_requires_grad(options.trainable);
      params_[u].push_back(param);
    }
    // This rank's shard, filled from the source slice by slice (padding stays zero).
    torch::Tensor shard = resident_ ? full_[u]
                          : options.offload_params ? host_empty(L.shard, options.dtype, device_)
                                                   : torch::empty({L.shard}, dev_opts);
    fill_shard(L, r, source, shard);
    shards_[u] = shard;
    if (resident_) {
      state_[u] = State::ready;
    } else {
      release_storage(full_[u]);
    }
  }
  if (options.trainable) {
    grads_.resize(n);
    kept_.resize(n);
    keep_returned_ = W == 1;  // more ranks reduce-scatter into the float32 shards
    if (!keep_returned_)
      for (size_t u = 0; u < n; ++u) grad_shard(u);
  }
  model_->set_block_runner([this](int64_t layer, const TransformerImpl::BlockFn& fn, const torch::Tensor& x) {
    return Internals::run_block(*this, layer, fn, x);
  });
}

ShardedModel::~ShardedModel() {
  if (model_) model_->set_block_runner(nullptr);
  for (auto& g : gathers_) g.wait();
  for (auto& r : reductions_) r.pending.wait();
}

bool ShardedModel::kept(size_t unit) const {
  return resident_ || full_kept_ || step_kept_ || (unit == 0 && root_held_);
}

std::vector<torch::Tensor> ShardedModel::unit_params(size_t unit) const { return params_[unit]; }

void ShardedModel::gather(size_t u) {
  QUARTET_CHECK(!parked_, "sharded model: used while parked on the host (unpark() first)");
  if (state_[u] != State::freed) return;
  allocate_storage(full_[u]);
  torch::Tensor src = shards_[u];
  if (options_.offload_params) src = src.to(device_, /*non_blocking=*/true);
  if (group_.size() == 1) {
    full_[u].copy_(src);
    state_[u] = State::ready;
    return;
  }
  gathers_[u] = group_.all_gather_async(src, full_[u]);
  state_[u] = State::in_flight;
}

void ShardedModel::ensure(size_t u) {
  gather(u);
  if (state_[u] == State::in_flight) {
    gathers_[u].wait();
    state_[u] = State::ready;
  }
}

void ShardedModel::release(size_t u) {
  if (kept(u) || state_[u] == State::freed) return;
  if (state_[u] == State::in_flight) gathers_[u].wait();  // never free under a running collective
  release_storage(full_[u]);
  state_[u] = State::freed;
}

torch::Tensor ShardedModel::run_block(int64_t layer, const TransformerImpl::BlockFn& fn, const torch::Tensor& x) {
  const size_t u = static_cast<size_t>(layer) + 1;
  const size_t last = layout_.size() - 1;
  ensure(u);
  if (u < last) gather(u + 1);  // prefetch: overlaps this block's compute
  const bool train = options_.trainable && torch::GradMode::is_enabled();
  if (!train) {
    auto y = fn(x);
    release(u);
    return y;
  }
  QUARTET_CHECK(x.requires_grad(), "sharded model: block input without gradient in a training pass");
  auto call = c10::make_intrusive<BlockCall>(
      [this](int64_t l) {
        const size_t unit = static_cast<size_t>(l) + 1;
        ensure(unit);
        if (unit > 1) gather(unit - 1);  // backward runs the blocks in reverse
      },
      [this](int64_t l, const std::vector<torch::Tensor>& grads) {
        const size_t unit = static_cast<size_t>(l) + 1;
        reduce_gradients(unit, grads);
        release(unit);
      },
      [this](int64_t l) { return unit_params(static_cast<size_t>(l) + 1); }, fn, layer, options_.checkpointing);
  auto y = ShardedBlock::apply(x, call)[0];
  if (options_.reshard_after_forward) release(u);
  else step_kept_ = true;  // its backward and the step's later micro-batches find it gathered
  return y;
}

torch::Tensor ShardedModel::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                    int64_t head_from, PaddingLayout padding) {
  const bool train = options_.trainable && torch::GradMode::is_enabled();
  const int64_t T = input_ids.size(-1);
  QUARTET_CHECK(head_from >= 0 && head_from < T, "sharded model: the head's first position " +
                                                     std::to_string(head_from) + " is outside 0.." +
                                                     std::to_string(T - 1));
  QUARTET_CHECK(head_from == 0 || model_->head() != Head::sequence_reward,
                "sharded model: a sequence reward head reads every position");
  ensure(0);
  if (train) root_held_ = true;
  // Transformer::forward's two halves, with the positions before head_from left out between.
  auto hidden = model_->hidden_states(input_ids, attention_mask, nullptr, padding);
  if (head_from > 0) hidden = hidden.narrow(1, head_from, T - head_from);
  auto out = model_->head_output(hidden, attention_mask);
  if (!train) release(0);
  return out;
}

torch::Tensor ShardedModel::forward_packed(const PackedSequences& packed, const torch::Tensor& at) {
  const bool train = options_.trainable && torch::GradMode::is_enabled();
  ensure(0);
  if (train) root_held_ = true;
  auto out = model_->head_at(model_->packed_hidden_states(packed), at);
  if (!train) release(0);
  return out;
}

void ShardedModel::reduce_gradients(size_t u, const std::vector<torch::Tensor>& grads) {
  const UnitLayout& L = layout_[u];
  if (group_.size() == 1) {
    if (keep_returned_ && grad_fresh_[u]) {
      // The step's first gradient of this unit: kept as it is (kept_).
      kept_[u].assign(L.params.size(), torch::Tensor());
      for (size_t k = 0; k < L.params.size() && k < grads.size(); ++k)
        if (grads[k].defined()) kept_[u][k] = grads[k].reshape({-1});
      grad_fresh_[u] = false;
      return;
    }
    land_kept_gradients();  // a later micro-batch adds to the float32 shards
    land(u, grads, /*add=*/!grad_fresh_[u]);
    grad_fresh_[u] = false;
    return;
  }
  const auto rdtype = options_.reduce_fp32 ? torch::kFloat32 : options_.dtype;
  auto flat = torch::empty({L.padded}, torch::TensorOptions().dtype(rdtype).device(device_));
  if (L.padded > L.numel) flat.narrow(0, L.numel, L.padded - L.numel).zero_();
  {
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < L.params.size(); ++k) {
      auto dst = flat.narrow(0, L.params[k].offset, L.params[k].numel);
      if (k < grads.size() && grads[k].defined()) dst.copy_(grads[k].reshape({-1}));
      else dst.zero_();
    }
  }
  // The first micro-batch lands straight in the gradient shard (in float32) or is copied
  // there once the collective is done; later ones land in a buffer added then.
  const bool direct = grad_fresh_[u] && rdtype == torch::kFloat32;
  auto out = direct ? grads_[u] : torch::empty({L.shard}, flat.options());
  const Landing landing = direct ? Landing::in_place : grad_fresh_[u] ? Landing::copy : Landing::add;
  reductions_.push_back(Reduction{group_.reduce_scatter_async(flat, out, ReduceOp::avg), out, u, landing});
  grad_fresh_[u] = false;
}

void ShardedModel::finish_gradients() {
  for (auto& r : reductions_) {
    r.pending.wait();
    if (r.landing == Landing::copy) grads_[r.unit].copy_(r.out);
    else if (r.landing == Landing::add) grads_[r.unit].add_(r.out);
  }
  reductions_.clear();
}

void ShardedModel::zero_unreached_gradients() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < grads_.size(); ++u)
    if (grad_fresh_[u]) grad_shard(u).zero_();
}

torch::Tensor& ShardedModel::grad_shard(size_t u) {
  if (!grads_[u].defined())
    grads_[u] = torch::zeros({layout_[u].shard}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  return grads_[u];
}

void ShardedModel::land(size_t u, const std::vector<torch::Tensor>& grads, bool add) {
  // Nothing to reduce: each gradient goes straight into its slice of the float32 shard
  // (converted, or added after the step's first micro-batch), with no flat buffer copied in
  // between. A parameter without a gradient: zero, or nothing to add.
  const UnitLayout& L = layout_[u];
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < L.params.size(); ++k) {
    auto dst = grad_shard(u).narrow(0, L.params[k].offset, L.params[k].numel);
    if (k >= grads.size() || !grads[k].defined()) {
      if (!add) dst.zero_();
      continue;
    }
    const auto g = grads[k].reshape({-1});
    if (land_gradient_supports(dst, g)) land_gradient(dst, g, add);
    else if (add) dst.add_(g);
    else dst.copy_(g);
  }
}

void ShardedModel::land_kept_gradients() {
  if (!keep_returned_) return;
  keep_returned_ = false;
  ++storage_version_;  // a captured step wrote the kept tensors; it must now write the shards
  for (size_t u = 0; u < kept_.size(); ++u) {
    if (kept_[u].empty()) continue;  // no gradient: zeroed when read, if it stays so
    land(u, kept_[u], /*add=*/false);
    kept_[u].clear();  // each unit's bfloat16 gradients go as its float32 shard comes
  }
}

void ShardedModel::backward(const torch::Tensor& loss) {
  QUARTET_CHECK(options_.trainable, "sharded model: backward() on a frozen model");
  QUARTET_CHECK(root_held_, "sharded model: backward() without a training forward() before it");
  // Kept blocks: the previous micro-batch's reductions, which had this one's forward to run,
  // are finished here, so that no more than one micro-batch's outputs wait at a time.
  if (!options_.reshard_after_forward) finish_gradients();
  loss.backward();
  // The root's parameters are ordinary leaves: their gradients are in .grad now.
  std::vector<torch::Tensor> grads;
  for (auto& p : params_[0]) {
    grads.push_back(p.grad().defined() ? p.grad() : torch::Tensor());
    p.mutable_grad() = torch::Tensor();
  }
  reduce_gradients(0, grads);
  // Kept blocks: the next micro-batch's forward needs no gather, so it need not wait for
  // these reductions either; its backward, grad_shards() and zero_grad() do.
  if (options_.reshard_after_forward) finish_gradients();
  root_held_ = false;
  release(0);
}

void ShardedModel::zero_grad() {
  // No pass over the shards: a fresh unit's first gradient overwrites its shard, and one that
  // gets none is zeroed when the gradients are read (grad_shards()).
  finish_gradients();
  grad_fresh_.assign(layout_.size(), true);
  for (auto& k : kept_) k.clear();
}

bool ShardedModel::graphable() const {
  return resident_ && options_.trainable && device_.is_cuda() && !parked_;
}

ShardedModel::GradientState ShardedModel::gradient_state() const {
  QUARTET_CHECK(group_.size() == 1 && reductions_.empty() && !root_held_,
                "sharded model: gradient_state() outside a one-rank step");
  return GradientState{keep_returned_, kept_, grad_fresh_};
}

void ShardedModel::set_gradient_state(const GradientState& g) {
  QUARTET_CHECK(group_.size() == 1 && g.kept_as_returned == keep_returned_ && !root_held_ &&
                    g.kept.size() == kept_.size() && g.fresh.size() == grad_fresh_.size(),
                "sharded model: set_gradient_state() from another gradient mode or model");
  kept_ = g.kept;
  grad_fresh_ = g.fresh;
}

void ShardedModel::gather_full() {
  for (size_t u = 0; u < layout_.size(); ++u) gather(u);
  for (size_t u = 0; u < layout_.size(); ++u) ensure(u);
  full_kept_ = true;
}

void ShardedModel::release_full() {
  full_kept_ = false;
  reshard();
}

void ShardedModel::reshard() {
  step_kept_ = false;
  for (size_t u = 0; u < layout_.size(); ++u) release(u);
}

void ShardedModel::park() {
  if (parked_) return;
  QUARTET_CHECK(!full_kept_ && !root_held_, "sharded model: park() while parameters are gathered");
  reshard();
  torch::NoGradGuard no_grad;
  parked_shards_.clear();
  for (size_t u = 0; u < layout_.size(); ++u) {
    if (!shards_[u].is_cuda()) {  // already in host memory
      parked_shards_.push_back(torch::Tensor());
      continue;
    }
    auto host = host_empty(layout_[u].shard, options_.dtype, device_);
    host.copy_(shards_[u]);
    parked_shards_.push_back(host);
    release_storage(shards_[u]);
    if (resident_) state_[u] = State::freed;
  }
  parked_ = true;
  ++storage_version_;
}

std::vector<torch::Tensor> ShardedModel::parked_or_live() const {
  // A unit that was already in host memory when parked has no parked copy: its shard is live.
  std::vector<torch::Tensor> out;
  for (size_t u = 0; u < layout_.size(); ++u) out.push_back(parked_shards_[u].defined() ? parked_shards_[u] : shards_[u]);
  return out;
}

void ShardedModel::unpark() {
  if (!parked_) return;
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < layout_.size(); ++u) {
    if (!parked_shards_[u].defined()) continue;
    allocate_storage(shards_[u]);
    shards_[u].copy_(parked_shards_[u], /*non_blocking=*/true);
    if (resident_) state_[u] = State::ready;
  }
  parked_shards_.clear();
  parked_ = false;
  ++storage_version_;
}

NamedTensors ShardedModel::full_state() {
  NamedTensors out;
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < layout_.size(); ++u) {
    ensure(u);
    for (size_t k = 0; k < layout_[u].params.size(); ++k)
      out.emplace_back(layout_[u].params[k].name, params_[u][k].detach().to(torch::kCPU).clone());
    release(u);
  }
  return out;
}

}  // namespace quartet
