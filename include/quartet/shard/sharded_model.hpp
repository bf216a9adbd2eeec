#pragma once
// One Transformer sharded over its model group, ZeRO-3 / FSDP style.
//
// Every rank keeps only its shard of each unit (flat_layout.hpp) in the compute dtype. The
// module's parameters are views into one full-size buffer per unit whose memory exists only
// while the unit is gathered:
//   forward   root gathered for the whole pass; block i gathered before it runs (block i + 1's
//             all-gather is issued first, so it overlaps block i's compute), freed after;
//   backward  block i re-gathered (block i - 1 prefetched), its gradients computed, flattened and
//             reduce-scattered (averaged over the group) into this rank's float32 gradient
//             shard while backward goes on; freed again; the root's gradients last.
// With activation checkpointing the block's forward keeps no activations and is recomputed in
// backward. Frozen models (reference, reward) are sharded the same way without gradients.
// The master weights and optimizer moments live in ShardedAdamW (sharded_adamw.hpp).
//
// Training a micro-batch is `auto out = model.forward(ids, mask); model.backward(loss(out));`.
// backward() must be used instead of loss.backward(): it finishes the root's gradients and
// waits for the outstanding reduce-scatters. Gradients accumulate over micro-batches until
// zero_grad().
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "quartet/dist/collectives.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/transformer.hpp"
#include "quartet/model/weight_map.hpp"
#include "quartet/shard/flat_layout.hpp"

namespace quartet {

struct ShardOptions {
  torch::ScalarType dtype = torch::kFloat32;  // parameters and compute
  bool trainable = true;        // gradients are kept (actor, critic) or not (reference, reward)
  bool checkpointing = false;   // activation checkpointing per block
  // A training forward frees each block's gathered parameters (true, ZeRO-3) or keeps them
  // (false: for its backward and the step's later micro-batches, until the shards change; one
  // all-gather of every block per optimizer step, for the gathered model's memory; FSDP's
  // reshard_after_forward and reshard_after_backward both off).
  bool reshard_after_forward = true;
  bool offload_params = false;  // parameter shards in (pinned) host memory between uses
  bool reduce_fp32 = true;      // gradients reduce-scattered in float32 (else in `dtype`)
};

// Values for the shards: elements [begin, begin + count) of parameter `name` (shape `shape`)
// flattened, as a 1-D tensor of any dtype and device. Asked once per parameter and rank, for
// the rank's slice only, so a rank reads no more than it keeps; first asked once for every
// parameter with count 0, to check names and shapes on every rank (it throws quartet::Error).
// (ParamSource is declared in flat_layout.hpp, beside probe_source and fill_shard.)
// From complete tensors by name (e.g. an unsharded model's hf_state()).
ParamSource source_from_state(const NamedTensors& state);
// From a Hugging Face checkpoint (memory-mapped: only the slices read are touched), by the rules
// Transformer::load_hf follows (model/weight_map.hpp), all checked when this is called. With
// HeadSource::fresh_if_missing a head the checkpoint lacks comes from `fresh`; `map`, when
// given, receives what was found, so that the caller can say which head starts fresh.
ParamSource source_from_checkpoint(std::shared_ptr<SafetensorsCheckpoint> checkpoint, const ModelConfig& config,
                                   Head head, HeadSource head_source = HeadSource::checkpoint,
                                   ParamSource fresh = {}, WeightMap* map = nullptr);
// Hugging Face's random initialisation (normal(0, initializer_range) for matrices, ones for
// norm weights, zeros for biases, a zero padding row for Llama's embedding), the same on every
// rank for a seed: each parameter is drawn whole on `device` from its own seeded generator.
ParamSource source_random(const ModelConfig& config, std::uint64_t seed, torch::Device device);

class ShardedModel {
 public:
  // `group` must outlive the model. Collective over the group.
  ShardedModel(const ModelConfig& config, Head head, Collectives& group, const ShardOptions& options,
               const ParamSource& source);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // The head's output (Transformer::forward). With grad mode on and a trainable model, the
  // root stays gathered until backward(). head_from > 0 runs the head on positions head_from ..
  // T-1 only (HF's logits_to_keep): a causal LM's log-probs of actions need no logits for the
  // prompt, and its head is the widest product of the model. Per-token heads only.
  // padding: where the mask's zeros lie (PaddingLayout, model/transformer.hpp).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        int64_t head_from = 0, PaddingLayout padding = PaddingLayout::anywhere);
  // forward() over packed sequences (model/packed_sequences.hpp), the head at the tokens `at`
  // only (Transformer::head_at): [1, M, V] logits, or [1, M] values or scores.
  torch::Tensor forward_packed(const PackedSequences& packed, const torch::Tensor& at);
  // loss.backward(), then the root's gradients, then every reduce-scatter awaited (with
  // reshard_after_forward = false: awaited by the next backward, or when the gradients are
  // read, grad_shards()).
  void backward(const torch::Tensor& loss);
  void zero_grad();

  // Hybrid engine: every unit gathered and kept until release_full() (generation, scoring of
  // many batches). The module then runs like an unsharded one.
  void gather_full();
  void release_full();
  bool gathered_full() const { return full_kept_; }
  // Colocated placement: the parameter shards move to (pinned) host memory and back.
  void park();
  void unpark();
  bool parked() const { return parked_; }

  // Every parameter gathered, on the CPU in the compute dtype, under its HF name. Collective.
  NamedTensors full_state();

  Transformer& module() { return model_; }
  const ModelConfig& config() const { return model_->config(); }
  Collectives& group() { return group_; }
  const ShardOptions& options() const { return options_; }
  const std::vector<UnitLayout>& layout() const { return layout_; }
  torch::Device device() const { return device_; }
  // This rank's shards, per unit: parameters (compute dtype) and gradients (float32). Handing
  // out the parameter shards (to be written: the optimizer step) frees the gathered copies kept
  // for the step, which would go stale; handing out the gradients finishes their reductions.
  std::vector<torch::Tensor>& param_shards() {
    reshard();
    return shards_;
  }
  std::vector<torch::Tensor>& grad_shards() {
    finish_gradients();
    land_kept_gradients();
    zero_unreached_gradients();
    return grads_;
  }
  // One rank: the step's gradients where autograd left them, for an optimizer that reads them
  // in place (adamw_step_own_gradient); null when they are not there (see kept_). Per unit: one
  // flat tensor per parameter in layout order, undefined for a parameter without a gradient;
  // no tensors at all for a unit without any.
  const std::vector<std::vector<torch::Tensor>>* gradients_as_returned() const {
    return keep_returned_ ? &kept_ : nullptr;
  }
  // One rank, for CUDA graphs of micro-batches (shard/step_graph.hpp): where the step's
  // gradients stand on the host side, i.e. which units got one since zero_grad() and, while
  // gradients are kept as returned, the tensors they are in. A captured micro-batch ran nothing,
  // so its capture puts back the state from before it; each replay (which rewrites the same
  // tensors, or the float32 shards, in place) sets the state the capture left, as if the pass had
  // run here. `graphable()`: the model whose micro-batches can be captured (one rank, on a GPU,
  // every unit resident). `storage_version()` changes whenever a captured graph would write or
  // read the wrong memory: the parameters move (park, unpark) or gradients stop being kept as
  // returned.
  struct GradientState {
    bool kept_as_returned = false;
    std::vector<std::vector<torch::Tensor>> kept;
    std::vector<bool> fresh;
  };
  bool graphable() const;
  GradientState gradient_state() const;
  void set_gradient_state(const GradientState& g);
  std::uint64_t storage_version() const { return storage_version_; }
  // Frees every gathered unit that nothing else keeps (reshard_after_forward = false keeps
  // them through a step's micro-batches).
  void reshard();
  // This rank's parameter shards wherever their values are now (the host copies while
  // parked): what a checkpoint saves.
  std::vector<torch::Tensor> current_shards() const { return parked_ ? parked_or_live() : shards_; }

  // Called by the block runner (sharded_model.cpp); not for users.
  struct Internals;

 private:
  enum class State { freed, in_flight, ready };
  void gather(size_t unit);        // start (or finish) the unit's all-gather
  void ensure(size_t unit);        // gathered and safe to read on the current stream
  void release(size_t unit);       // free the full buffer (unless kept)
  bool kept(size_t unit) const;
  std::vector<torch::Tensor> parked_or_live() const;
  std::vector<torch::Tensor> unit_params(size_t unit) const;
  void reduce_gradients(size_t unit, const std::vector<torch::Tensor>& grads);
  void finish_gradients();
  void zero_unreached_gradients();  // shards of units with no gradient since zero_grad() set to 0
  void land_kept_gradients();       // kept_ into the float32 shards; keeping stops for good
  void land(size_t unit, const std::vector<torch::Tensor>& grads, bool add);  // one rank: into grad_shard(unit)
  torch::Tensor& grad_shard(size_t unit);  // grads_[unit], allocated (zeroed) on first use
  torch::Tensor run_block(int64_t layer, const TransformerImpl::BlockFn& fn, const torch::Tensor& x);

  Collectives& group_;
  ShardOptions options_;
  torch::Device device_;
  Transformer model_{nullptr};
  std::vector<UnitLayout> layout_;
  std::vector<std::vector<torch::Tensor>> params_;  // the module's parameters per unit, layout order
  std::vector<torch::Tensor> full_;    // per unit: the full flat buffer the parameters view
  std::vector<torch::Tensor> shards_;  // per unit: this rank's shard (device, or host if offloaded)
  std::vector<torch::Tensor> grads_;   // per unit: float32 gradient shard (trainable only)
  // One rank, the step's first micro-batch: a unit's gradients stay as autograd returned them
  // (kept_[unit]) rather than landing in its float32 shard. An optimizer reading them in place
  // saves that pass and half the gradient bytes it reads. The first time anything needs the
  // float32 shards (a later micro-batch adds to them, or grad_shards() is read), the kept ones
  // land, the shards are allocated, and keeping stops for good: the model then never holds both,
  // so its gradients never take more memory than the float32 shards the plan counts.
  std::vector<std::vector<torch::Tensor>> kept_;
  bool keep_returned_ = false;
  std::vector<torch::Tensor> parked_shards_;
  std::vector<State> state_;
  std::vector<Pending> gathers_;
  std::vector<bool> grad_fresh_;       // no gradient since zero_grad(): the shard's values are stale
  // Where a reduce-scatter's output goes once it is done: it was written into the gradient
  // shard itself, or is copied there (the step's first gradient), or added to it.
  enum class Landing { in_place, copy, add };
  struct Reduction {
    Pending pending;
    torch::Tensor out;   // reduce-scatter output
    size_t unit;
    Landing landing;
  };
  std::vector<Reduction> reductions_;
  bool resident_ = false;  // one rank and no offload: full buffers are the shards, never freed
  bool full_kept_ = false;
  bool root_held_ = false;
  bool step_kept_ = false;  // reshard_after_forward = false: gathered units kept until reshard()
  bool parked_ = false;
  std::uint64_t storage_version_ = 0;

  friend struct Internals;
};

}  // namespace quartet
