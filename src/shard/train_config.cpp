#include "quartet/shard/train_config.hpp"

namespace quartet {

namespace {

using T = TrainConfig;

constexpr Choice<ReducePrecision> kReducePrecisions[] = {{"float32", ReducePrecision::float32}, {"model", ReducePrecision::model}};
constexpr Choice<LrSchedule> kSchedules[] = {
    {"constant", LrSchedule::constant}, {"linear", LrSchedule::linear}, {"cosine", LrSchedule::cosine}};

const Check<double> kBeta = [](const double& b) { return b >= 0 && b < 1 ? "" : "must be in [0, 1)"; };

}  // namespace

const char* name_of(ReducePrecision value) { return choice_name(value, kReducePrecisions); }
const char* name_of(LrSchedule value) { return choice_name(value, kSchedules); }

const Section<TrainConfig>& train_section() {
  static const Section<T> section("train", "Training: micro-batches and the optimizer", {
      key("micro_batch", &T::micro_batch, at_least(1), "sequences per forward/backward pass and rank (count, >= 1)"),
      key("micro_batch_tokens", &T::micro_batch_tokens, at_least(0), "quartet train's updates pack each minibatch's sequences back to back without padding into micro-batches of up to this many tokens and rank (a longer sequence alone), each attending within itself only (0 = micro_batch padded sequences a micro-batch; packed ones run without CUDA graphs)"),
      key("max_grad_norm", &T::max_grad_norm, at_least(0.0), "clip the global gradient norm to this (0 = off)"),
      key("adam_beta1", &T::adam_beta1, kBeta, "AdamW beta1, in [0, 1)"),
      key("adam_beta2", &T::adam_beta2, kBeta, "AdamW beta2, in [0, 1)"),
      key("adam_eps", &T::adam_eps, above(0.0), "AdamW epsilon (> 0)"),
      choice("reduce_dtype", &T::reduce_dtype, kReducePrecisions, "gradient reduce-scatter precision: float32 | model"),
      key("warmup", &T::warmup, at_least(0), "learning-rate warm-up in optimizer steps (>= 0)"),
      choice("schedule", &T::schedule, kSchedules, "learning rate after warm-up: constant | linear | cosine (decay to min_lr_ratio over the run)"),
      key("min_lr_ratio", &T::min_lr_ratio, within(0.0, 1.0), "floor of the decayed learning rate, as a fraction of lr, in [0, 1]"),
      key("cuda_graphs", &T::cuda_graphs, "a trained model alone on its GPU runs its training micro-batches as replayed CUDA graphs; their memory stays reserved (the plan's \"train graph\")"),
  });
  return section;
}

}  // namespace quartet
