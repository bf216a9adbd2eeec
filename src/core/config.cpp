#include "quartet/core/config.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "quartet/core/files.hpp"
#include "quartet/core/hf_cache.hpp"

namespace po = boost::program_options;

namespace quartet {

namespace {

// A choice key's values as the deck spells them: parsed once into the enum when the deck is
// loaded, named back from the same table.
template <class E>
struct Named {
  const char* name;
  E value;
};
constexpr Named<Algorithm> kAlgorithms[] = {{"ppo", Algorithm::ppo},
                                            {"grpo", Algorithm::grpo},
                                            {"rloo", Algorithm::rloo},
                                            {"reinforce++", Algorithm::reinforce_pp},
                                            {"reinforce++-baseline", Algorithm::reinforce_pp_baseline}};
constexpr Named<KlEstimator> kKlEstimators[] = {{"k1", KlEstimator::k1}, {"k2", KlEstimator::k2}, {"k3", KlEstimator::k3}};
constexpr Named<PolicyLossKind> kPolicyLosses[] = {{"ppo", PolicyLossKind::ppo}, {"gspo", PolicyLossKind::gspo}};
constexpr Named<LossAgg> kLossAggs[] = {{"token-mean", LossAgg::token_mean},
                                        {"seq-mean-token-mean", LossAgg::seq_mean_token_mean},
                                        {"seq-mean-token-sum-norm", LossAgg::seq_mean_token_sum_norm}};
constexpr Named<KlControl> kKlControllers[] = {{"fixed", KlControl::fixed}, {"adaptive", KlControl::adaptive}};
constexpr Named<PlacementMode> kPlacementModes[] = {{"disjoint", PlacementMode::disjoint},
                                                    {"colocated", PlacementMode::colocated}};
constexpr Named<Parking> kParkings[] = {{"auto", Parking::automatic}, {"always", Parking::always}, {"never", Parking::never}};
constexpr Named<Backend> kBackends[] = {{"auto", Backend::automatic}, {"nccl", Backend::nccl}, {"mpi", Backend::mpi}};
constexpr Named<DeviceKind> kDevices[] = {{"auto", DeviceKind::automatic}, {"cuda", DeviceKind::cuda}, {"cpu", DeviceKind::cpu}};
constexpr Named<ReducePrecision> kReducePrecisions[] = {{"float32", ReducePrecision::float32}, {"model", ReducePrecision::model}};
constexpr Named<LrSchedule> kSchedules[] = {
    {"constant", LrSchedule::constant}, {"linear", LrSchedule::linear}, {"cosine", LrSchedule::cosine}};
constexpr Named<OnDamaged> kOnDamaged[] = {{"refuse", OnDamaged::refuse}, {"start_over", OnDamaged::start_over}};

template <class E, size_t N>
std::string choices(const Named<E> (&table)[N]) {
  std::string list;
  for (const auto& n : table) list += (list.empty() ? "" : " | ") + std::string(n.name);
  return list;
}

template <class E, size_t N>
E choose(const Deck& deck, const std::string& key, const Named<E> (&table)[N]) {
  const std::string value = deck.get<std::string>(key);
  for (const auto& n : table)
    if (value == n.name) return n.value;
  deck.fail(key, "is '" + value + "'; expected one of: " + choices(table));
}

template <class E, size_t N>
const char* name_in(E value, const Named<E> (&table)[N]) {
  for (const auto& n : table)
    if (n.value == value) return n.name;
  return "?";
}

// [run]: the run's name, output, seed, length and time budget.
void add_run_keys(po::options_description& d) {
  RunConfig run;
  d.add_options()
      ("run.name", po::value<std::string>()->default_value(run.name), "run name, for logs and the run file")
      ("run.out", po::value<std::string>()->default_value(run.out), "output directory (run.h5, checkpoints/)")
      ("run.seed", po::value<std::uint64_t>()->default_value(run.seed), "base random seed")
      ("run.iterations", po::value<int>()->default_value(run.iterations), "iterations of the main loop (count, >= 1)")
      ("run.time_limit", po::value<std::string>()->default_value("0"), "wall-clock budget: checkpoint and exit 75 (resubmit) before it runs out; seconds or e.g. 90m, 23h30m (0 = none)");
}
// [checkpoint]: when to write, what to keep, where to resume from.
void add_checkpoint_keys(po::options_description& d) {
  d.add_options()
      ("checkpoint.every", po::value<int>()->default_value(0), "write a checkpoint every N iterations (0 = only at the end and when stopped by a signal or the time limit)")
      ("checkpoint.keep", po::value<int>()->default_value(2), "complete checkpoints kept: the newest N (>= 1)")
      ("checkpoint.keep_every", po::value<int>()->default_value(0), "also keep every checkpoint whose iteration is a multiple of N (0 = none)")
      ("checkpoint.at_end", po::value<bool>()->default_value(true), "write a checkpoint after the last iteration")
      ("checkpoint.resume", po::value<std::string>()->default_value("auto"), "auto (continue from the newest complete checkpoint in run.out, if any) | never | a step_<N> directory")
      ("checkpoint.on_damaged", po::value<std::string>()->default_value(name_of(OnDamaged::refuse)), "resume = auto, and run.out holds checkpoints but none is intact: refuse (exit 2, naming each and its fault; nothing is touched) | start_over (move them to checkpoints.damaged-<time>/, run.h5 aside, start at iteration 0)");
}
// [placement]: which ranks hold which model.
void add_placement_keys(po::options_description& d) {
  PlacementConfig pl;
  d.add_options()
      ("placement.mode", po::value<std::string>()->default_value(name_of(pl.mode)), "disjoint (one role per rank) | colocated (every role on every rank)")
      ("placement.actor", po::value<int>()->default_value(-1), "ranks for the actor (policy); >= 1")
      ("placement.critic", po::value<int>()->default_value(-1), "ranks for the critic (value model); 0 = no critic")
      ("placement.reference", po::value<int>()->default_value(-1), "ranks for the frozen reference policy; 0 = none")
      ("placement.reward", po::value<int>()->default_value(-1), "ranks for the reward model; 0 = none (rule reward)")
      ("placement.park", po::value<std::string>()->default_value(name_of(pl.park)), "colocated: move idle models' parameter and gradient shards to host memory: auto (only when the plan needs it) | always | never");
}
// [dist]: devices, collectives, the watchdog.
void add_dist_keys(po::options_description& d) {
  DistConfig dist;
  d.add_options()
      ("dist.backend", po::value<std::string>()->default_value(name_of(dist.backend)), "collectives inside a group: auto (nccl on GPUs, else mpi) | nccl | mpi")
      ("dist.device", po::value<std::string>()->default_value(name_of(dist.device)), "auto (a GPU when there is one) | cuda | cpu")
      ("dist.watchdog_timeout", po::value<double>()->default_value(dist.watchdog_timeout), "seconds a collective or exchange may stall before the job is aborted (> 0)")
      ("dist.device_memory", po::value<std::string>()->default_value("auto"), "memory of one device for the plan: auto (ask the device) or bytes, e.g. 80GiB");
}
// [model.reward]'s keys for a reward in the user's own code (kind = command:... | http://...).
void add_reward_call_keys(po::options_description& d) {
  RewardCallConfig c;
  d.add_options()
      ("model.reward.timeout", po::value<double>()->default_value(c.timeout), "command: and http: rewards: seconds one batch may take (the program's reply, or one HTTP attempt), > 0; past it the run stops with an error")
      ("model.reward.start_timeout", po::value<double>()->default_value(c.start_timeout), "command: seconds the program may take to start and answer its first, empty request (> 0)")
      ("model.reward.retries", po::value<int>()->default_value(c.retries), "http: further attempts after a connection error (refused, reset, closed without a response), >= 0; a timeout or an HTTP error status is not retried")
      ("model.reward.retry_delay", po::value<double>()->default_value(c.retry_delay), "http: seconds before the first retry, doubled for each next one (>= 0)");
}
// [model.actor], [model.critic], [model.reference], [model.reward]: the same keys for each role.
void add_model_keys(po::options_description& d) {
  ModelSectionConfig m;
  d.add_options()
      ("model.hub_cache", po::value<std::string>()->default_value(""), "the Hugging Face hub cache in which hf:ORG/NAME[@REVISION] paths are found (\"\" = where huggingface_hub looks: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); nothing is downloaded");
  for (const char* role : {"actor", "critic", "reference", "reward"}) {
    std::string sec = std::string("model.") + role;
    auto key = [&](const char* k) { return sec + "." + k; };
    d.add_options()
        (key("path").c_str(), po::value<std::string>()->default_value(""), (std::string("Hugging Face model directory (config.json, *.safetensors, tokenizer.json); hf:ORG/NAME[@REVISION] (that model in the local hub cache, model.hub_cache); random:FILE.json (that config, random weights); random:<family> (") + kRandomFamilies + ", sized by the keys below)").c_str())
        (key("kind").c_str(), po::value<std::string>()->default_value(m.kind), "reward only: model (the model at path) | rule:<task> (a built-in verifiable reward: rule:sort_digits, rule:add) | command:<command line> (your program, one per actor rank, run by /bin/sh -c; JSON lines on its stdin and stdout: docs/reward-programs.md) | http://HOST[:PORT]/PATH or https://... (an endpoint taking OpenRLHF's remote reward model requests; http:<URL> also works)")
        (key("dtype").c_str(), po::value<std::string>()->default_value(m.dtype), "float32 | bfloat16 | float16: parameters and compute")
        (key("hidden").c_str(), po::value<int>()->default_value(m.hidden), "random:<family>: hidden size")
        (key("layers").c_str(), po::value<int>()->default_value(m.layers), "random:<family>: transformer blocks")
        (key("heads").c_str(), po::value<int>()->default_value(m.heads), "random:<family>: attention heads")
        (key("kv_heads").c_str(), po::value<int>()->default_value(m.kv_heads), "random:<family>: key/value heads (0 = heads)")
        (key("ffn").c_str(), po::value<int>()->default_value(m.ffn), "random:<family>: MLP width (0 = the family's default)")
        (key("vocab").c_str(), po::value<int>()->default_value(m.vocab), "random:<family>: vocabulary (0 = the tokenizer's)")
        (key("max_positions").c_str(), po::value<int>()->default_value(m.max_positions), "random:<family>: longest sequence")
        (key("head_dim").c_str(), po::value<int>()->default_value(m.head_dim), "random:llama | mistral | qwen3: width of each attention head (0 = hidden / heads)")
        (key("sliding_window").c_str(), po::value<int>()->default_value(m.sliding_window), "random:mistral | qwen3: sliding-window attention in every layer, each token seeing itself and the sliding_window - 1 tokens before it (0 = none)")
        (key("checkpointing").c_str(), po::value<bool>()->default_value(m.checkpointing), "activation checkpointing per block (true | false)")
        (key("reshard_after_forward").c_str(), po::value<bool>()->default_value(m.reshard_after_forward), "trained roles: free each block's gathered parameters after its forward (true) or keep them until the optimizer step (false: one all-gather per block and step, the whole model gathered)")
        (key("offload_optimizer").c_str(), po::value<bool>()->default_value(m.offload_optimizer), "master weights and AdamW moments in pinned host memory, step on the CPU")
        (key("offload_params").c_str(), po::value<bool>()->default_value(m.offload_params), "parameter shards in pinned host memory")
        (key("lr").c_str(), po::value<double>()->default_value(m.lr), "AdamW learning rate (> 0)")
        (key("weight_decay").c_str(), po::value<double>()->default_value(m.weight_decay), "AdamW decoupled weight decay (>= 0; biases and norms excluded)");
  }
  add_reward_call_keys(d);
}
// [train]: micro-batches, the optimizer, the learning-rate schedule.
void add_train_keys(po::options_description& d) {
  TrainConfig tr;
  d.add_options()
      ("train.micro_batch", po::value<int>()->default_value(tr.micro_batch), "sequences per forward/backward pass and rank (count, >= 1)")
      ("train.max_grad_norm", po::value<double>()->default_value(tr.max_grad_norm), "clip the global gradient norm to this (0 = off)")
      ("train.adam_beta1", po::value<double>()->default_value(tr.adam_beta1), "AdamW beta1, in [0, 1)")
      ("train.adam_beta2", po::value<double>()->default_value(tr.adam_beta2), "AdamW beta2, in [0, 1)")
      ("train.adam_eps", po::value<double>()->default_value(tr.adam_eps), "AdamW epsilon (> 0)")
      ("train.reduce_dtype", po::value<std::string>()->default_value(name_of(tr.reduce_dtype)), "gradient reduce-scatter precision: float32 | model")
      ("train.warmup", po::value<int>()->default_value(tr.warmup), "learning-rate warm-up in optimizer steps (>= 0)")
      ("train.schedule", po::value<std::string>()->default_value(name_of(tr.schedule)), "learning rate after warm-up: constant | linear | cosine (decay to min_lr_ratio over the run)")
      ("train.min_lr_ratio", po::value<double>()->default_value(tr.min_lr_ratio), "floor of the decayed learning rate, as a fraction of lr, in [0, 1]")
      ("train.cuda_graphs", po::value<bool>()->default_value(tr.cuda_graphs), "a trained model alone on its GPU runs its training micro-batches as replayed CUDA graphs; their memory stays reserved (the plan's \"train graph\")")
      ("train.micro_batch_tokens", po::value<int>()->default_value(tr.micro_batch_tokens), "quartet train's updates pack each minibatch's sequences back to back without padding into micro-batches of up to this many tokens and rank (a longer sequence alone), each attending within itself only (0 = micro_batch padded sequences a micro-batch; packed ones run without CUDA graphs)");
}
// [algorithm]: the RL algorithm and its coefficients.
void add_algorithm_keys(po::options_description& d) {
  AlgorithmConfig al;
  d.add_options()
      ("algorithm.name", po::value<std::string>()->default_value(name_of(al.algorithm)), choices(kAlgorithms).c_str())
      ("algorithm.kl_coef", po::value<double>()->default_value(al.kl_coef), "KL penalty coefficient (>= 0; initial value when adaptive)")
      ("algorithm.kl_estimator", po::value<std::string>()->default_value("auto"), ("auto (k1 for the KL in the reward and the logs, k3 for GRPO's KL loss term) | " + choices(kKlEstimators) + " (both)").c_str())
      ("algorithm.kl_controller", po::value<std::string>()->default_value(name_of(al.kl_controller)), choices(kKlControllers).c_str())
      ("algorithm.kl_target", po::value<double>()->default_value(al.kl_target), "adaptive controller: target KL per sequence (> 0)")
      ("algorithm.kl_horizon", po::value<double>()->default_value(al.kl_horizon), "adaptive controller: horizon in samples (> 0)")
      ("algorithm.gamma", po::value<double>()->default_value(al.gamma), "discount, in [0, 1]")
      ("algorithm.lambda", po::value<double>()->default_value(al.lambda), "GAE lambda, in [0, 1]")
      ("algorithm.clip_eps", po::value<double>()->default_value(al.clip_eps), "PPO ratio clip (> 0): the ratio is clipped to [1 - clip_low, 1 + clip_high], both clip_eps unless given")
      ("algorithm.clip_low", po::value<double>()->default_value(0.0), "lower clip of the ratio, 1 - clip_low (in [0, 1); 0 = clip_eps)")
      ("algorithm.clip_high", po::value<double>()->default_value(0.0), "upper clip of the ratio, 1 + clip_high (>= 0; 0 = clip_eps); DAPO's clip-higher: 0.28 against clip_low 0.2")
      ("algorithm.clip_ratio_c", po::value<double>()->default_value(al.clip_ratio_c), "dual-clip PPO: a negative-advantage token's loss is at most clip_ratio_c * |A| (0 = off, else > 1; verl's default is 3)")
      ("algorithm.policy_loss", po::value<std::string>()->default_value(name_of(al.policy_loss)), "ppo (a ratio per token) | gspo (GSPO: one length-normalised ratio per sequence, clipped to [1 - clip_low, 1 + clip_high])")
      ("algorithm.loss_agg_mode", po::value<std::string>()->default_value(name_of(al.loss_agg_mode)), "how the policy loss's per-token terms become one loss per optimizer step: token-mean (over every token of the minibatch, all actor ranks) | seq-mean-token-mean (each sequence's token mean, averaged over sequences) | seq-mean-token-sum-norm (each sequence's token sum / loss_agg_norm, averaged over sequences: Dr. GRPO)")
      ("algorithm.loss_agg_norm", po::value<double>()->default_value(al.loss_agg_norm), "seq-mean-token-sum-norm's constant divisor (>= 0; 0 = rollout.max_new_tokens)")
      ("algorithm.norm_adv_by_std", po::value<bool>()->default_value(al.norm_adv_by_std), "grpo: divide each score's distance from its group's mean by the group's std (false: Dr. GRPO)")
      ("algorithm.value_clip", po::value<double>()->default_value(al.value_clip), "value clip around the old values (0 = off)")
      ("algorithm.value_coef", po::value<double>()->default_value(al.value_coef), "the critic's loss is multiplied by this (> 0; it has its own optimizer, so this matters through max_grad_norm and adam_eps)")
      ("algorithm.entropy_coef", po::value<double>()->default_value(al.entropy_coef), "entropy bonus weight (>= 0); the entropy metric is logged either way")
      ("algorithm.epochs", po::value<int>()->default_value(al.epochs), "passes over each rollout batch (>= 1)")
      ("algorithm.minibatch", po::value<int>()->default_value(al.minibatch), "sequences per optimizer step and rank (>= 1)")
      ("algorithm.reward_clip", po::value<double>()->default_value(al.reward_clip), "clip scores to [-c, c] (0 = off)")
      ("algorithm.normalize_rewards", po::value<bool>()->default_value(al.normalize_rewards), "divide scores by their running standard deviation")
      ("algorithm.whiten_advantages", po::value<bool>()->default_value(al.whiten_advantages), "whiten advantages over the actor group's batch (ppo, reinforce++, reinforce++-baseline)")
      ("algorithm.samples_per_prompt", po::value<int>()->default_value(al.samples_per_prompt), "completions per prompt (>= 1; grpo, rloo and reinforce++-baseline need >= 2)")
      ("algorithm.dynamic_sampling", po::value<bool>()->default_value(al.dynamic_sampling), "DAPO's dynamic sampling: drop prompt groups whose samples all score the same and generate more prompts until rollout.batch groups are kept (critic-free algorithms, samples_per_prompt >= 2)")
      ("algorithm.dynamic_sampling_max_rounds", po::value<int>()->default_value(al.dynamic_sampling_max_rounds), "dynamic sampling: generation rounds per iteration at most (>= 1); short of groups after them, the batch is filled with dropped ones")
      ("algorithm.overlong_filter", po::value<bool>()->default_value(al.overlong_filter), "truncated samples (no stop token within rollout.max_new_tokens) count nothing in the policy loss")
      ("algorithm.overlong_buffer", po::value<int>()->default_value(al.overlong_buffer), "DAPO's soft overlong penalty: completions longer than rollout.max_new_tokens - overlong_buffer tokens lose overlong_penalty_factor * (length - that) / overlong_buffer of their score (tokens, 0 = off)")
      ("algorithm.overlong_penalty_factor", po::value<double>()->default_value(al.overlong_penalty_factor), "the soft overlong penalty at rollout.max_new_tokens tokens (>= 0)");
}
// [output]: what the log and the run file show.
void add_output_keys(po::options_description& d) {
  d.add_options()
      ("output.sample_every", po::value<int>()->default_value(0), "print one sampled prompt, completion and score every N iterations (0 = never)")
      ("output.rollouts_every", po::value<int>()->default_value(10), "store the rollouts in <run.out>/run.h5 every N iterations (0 = never)");
}
// [rollout]: prompts and sampling.
void add_rollout_keys(po::options_description& d) {
  RolloutConfig ro;
  d.add_options()
      ("rollout.prompts", po::value<std::string>()->default_value(""), "prompts file: JSONL, one {\"prompt\": \"...\"} per line, or one inputs/prepare/prepare_prompts.py wrote (token ids made for the actor's tokenizer and chat template: docs/data.md), or pre-tokenised HDF5")
      ("rollout.prompt_field", po::value<std::string>()->default_value(ro.prompt_field), "plain JSONL field with the prompt text (a prepared file's is always prompt)")
      ("rollout.batch", po::value<int>()->default_value(ro.batch), "prompts per generation batch and rank (count, >= 1)")
      ("rollout.micro_batch", po::value<int>()->default_value(ro.micro_batch), "prompts per generation chunk and rank (0 = the whole batch); the scoring groups score chunk c while chunk c+1 is generated")
      ("rollout.score_micro_batch", po::value<int>()->default_value(ro.score_micro_batch), "sequences per scoring forward pass (log-probs, values, rewards) and rank (0 = a whole generation chunk)")
      ("rollout.score_tokens", po::value<int>()->default_value(ro.score_tokens), "packed scoring: each pass holds consecutive sequences back to back without padding, up to this many tokens and rank (a longer sequence alone), each attending within itself only, so that its cost follows the tokens (0 = padded passes of score_micro_batch sequences)")
      ("rollout.max_prompt_tokens", po::value<int>()->default_value(ro.max_prompt_tokens), "longest prompt in tokens (count, >= 1)")
      ("rollout.max_new_tokens", po::value<int>()->default_value(ro.max_new_tokens), "tokens generated at most per prompt (count, >= 1)")
      ("rollout.min_new_tokens", po::value<int>()->default_value(ro.min_new_tokens), "no stop token (EOS included) is sampled before this many new tokens (count, 0 .. max_new_tokens), as HF generate's min_new_tokens")
      ("rollout.temperature", po::value<double>()->default_value(ro.temperature), "sampling temperature (>= 0; 0 = greedy)")
      ("rollout.top_k", po::value<int>()->default_value(ro.top_k), "sample from the k likeliest tokens (count; 0 = off)")
      ("rollout.top_p", po::value<double>()->default_value(ro.top_p), "nucleus sampling mass (0 < p <= 1; 1 = off)")
      ("rollout.stop", po::value<std::string>()->default_value(""), "comma-separated stop tokens (token strings); EOS always stops")
      ("rollout.decode_rows", po::value<int>()->default_value(ro.decode_rows), "continuous batching over a paged KV cache: at most this many sequences decode at once and rank, a finished sequence's row taking the next waiting one, so that the batch stays full while answer lengths differ (0 = every sequence of a generation chunk at once, over a contiguous cache of max_prompt_tokens + max_new_tokens slots a sequence); not with reuse_prompt_cache")
      ("rollout.kv_block", po::value<int>()->default_value(ro.kv_block), "paged KV cache (decode_rows > 0): slots per block (count, >= 1)")
      ("rollout.kv_cache_tokens", po::value<int>()->default_value(ro.kv_cache_tokens), "paged KV cache (decode_rows > 0): the pool's slots, shared by the rows as their sequences grow; when it runs out the youngest rows restart later (0 = decode_rows x (max_prompt_tokens + max_new_tokens), which never runs out; else at least max_prompt_tokens + max_new_tokens)")
      ("rollout.reuse_prompt_cache", po::value<bool>()->default_value(ro.reuse_prompt_cache), "the actor's old log-probs continue from generation's KV cache instead of running the prompt again (faster; equal to the full pass to rounding, which in bf16 leans towards the sampler's: a KL of about 2e-4 a token where actor and reference are equal)");
}

// [eval]: held-out prompts, when and how they are measured.
void add_eval_keys(po::options_description& d) {
  EvalConfig ev;
  d.add_options()
      ("eval.prompts", po::value<std::string>()->default_value(""), "held-out prompts file measured during training, in any format rollout.prompts reads (\"\" = no evaluation)")
      ("eval.prompt_field", po::value<std::string>()->default_value(""), "plain JSONL field with the prompt text (\"\" = rollout.prompt_field)")
      ("eval.every", po::value<int>()->default_value(ev.every), "evaluate every N iterations (0 = only at the end)")
      ("eval.at_start", po::value<bool>()->default_value(ev.at_start), "also evaluate before the first iteration (the series' point at iteration 0)")
      ("eval.at_end", po::value<bool>()->default_value(ev.at_end), "evaluate after the last iteration")
      ("eval.count", po::value<int>()->default_value(ev.count), "prompts evaluated: the first N of the file (0 = all), shared out over the actor ranks")
      ("eval.samples", po::value<int>()->default_value(ev.samples), "completions sampled per prompt for n-sample pass@1 and pass@k (0 = greedy only)")
      ("eval.k", po::value<std::string>()->default_value(""), "comma-separated k of pass@k, each 1 .. eval.samples (unbiased estimator of Chen et al. 2021)")
      ("eval.temperature", po::value<double>()->default_value(ev.temperature), "sampling temperature of the n-sample part (> 0; greedy pass@1 is always at 0)")
      ("eval.max_new_tokens", po::value<int>()->default_value(ev.max_new_tokens), "tokens generated at most per completion (0 = rollout.max_new_tokens, which it may not exceed)")
      ("eval.pass_threshold", po::value<double>()->default_value(ev.pass_threshold), "a completion passes when its reward is at least this (1.0: exactly right under the rule rewards)")
      ("eval.reward", po::value<std::string>()->default_value(""), "the reward that grades the evaluation: \"\" = the run's own (reward.terms or model.reward.kind); else one text reward kind: rule:<task> | math | match | regex | format | command:<command line> | http://... (e.g. match: exact-match accuracy against the prompts' answers while training against a learnt reward model)");
}

}  // namespace

const char* name_of(Algorithm value) { return name_in(value, kAlgorithms); }
const char* name_of(KlEstimator value) { return name_in(value, kKlEstimators); }
const char* name_of(KlControl value) { return name_in(value, kKlControllers); }
const char* name_of(PolicyLossKind value) { return name_in(value, kPolicyLosses); }
const char* name_of(LossAgg value) { return name_in(value, kLossAggs); }
const char* name_of(PlacementMode value) { return name_in(value, kPlacementModes); }
const char* name_of(Parking value) { return name_in(value, kParkings); }
const char* name_of(Backend value) { return name_in(value, kBackends); }
const char* name_of(DeviceKind value) { return name_in(value, kDevices); }
const char* name_of(ReducePrecision value) { return name_in(value, kReducePrecisions); }
const char* name_of(LrSchedule value) { return name_in(value, kSchedules); }
const char* name_of(OnDamaged value) { return name_in(value, kOnDamaged); }

const po::options_description& deck_schema() {
  static const po::options_description schema = [] {
    po::options_description d("Deck keys (section.key, default)");
    for (auto add : {add_run_keys, add_checkpoint_keys, add_placement_keys, add_dist_keys, add_model_keys, add_train_keys,
                     add_algorithm_keys, add_output_keys, add_rollout_keys, add_eval_keys})
      add(d);
    d.add(kernels_schema());
    d.add(reward_schema());
    d.add(sft_schema());
    d.add(dpo_schema());
    d.add(rm_schema());
    return d;
  }();
  return schema;
}

std::uint64_t parse_bytes(const std::string& text) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += ch;
  if (t == "auto") return 0;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = t.substr(used);
  struct { const char* name; double factor; } units[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& u : units)
    if (used > 0 && unit == u.name && value > 0) return static_cast<std::uint64_t>(value * u.factor);
  throw std::invalid_argument("'" + text + "' is not a size: write auto, or a positive number with an "
                              "optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 80GiB");
}

bool is_random_family(const std::string& family) {
  for (const char* f : {"llama", "mistral", "qwen3", "gpt2", "gptj", "gpt_neox"})
    if (family == f) return true;
  return false;
}

namespace {

// Each section's keys, typed and range-checked; a DeckError names the key and its line.

RunConfig load_run(const Deck& deck) {
  RunConfig r;
  r.name = deck.get<std::string>("run.name");
  r.out = deck.get<std::string>("run.out");
  r.seed = deck.get<std::uint64_t>("run.seed");
  r.iterations = deck.get<int>("run.iterations");
  if (r.iterations < 1) deck.fail("run.iterations", "must be at least 1");
  try {
    r.time_limit = parse_duration(deck.get<std::string>("run.time_limit"));
  } catch (const std::invalid_argument& e) {
    deck.fail("run.time_limit", e.what());
  }
  return r;
}

CheckpointConfig load_checkpoint(const Deck& deck) {
  CheckpointConfig c;
  c.every = deck.get<int>("checkpoint.every");
  if (c.every < 0) deck.fail("checkpoint.every", "must be >= 0");
  c.keep = deck.get<int>("checkpoint.keep");
  if (c.keep < 1) deck.fail("checkpoint.keep", "must be at least 1 (the checkpoint to resume from)");
  c.keep_every = deck.get<int>("checkpoint.keep_every");
  if (c.keep_every < 0) deck.fail("checkpoint.keep_every", "must be >= 0");
  c.at_end = deck.get<bool>("checkpoint.at_end");
  c.resume = deck.get<std::string>("checkpoint.resume");
  c.on_damaged = choose(deck, "checkpoint.on_damaged", kOnDamaged);
  if (c.resume != "auto" && c.resume != "never" && !is_directory(c.resume))
    deck.fail("checkpoint.resume", "is '" + c.resume + "': expected auto, never, or an existing step_<N> directory");
  return c;
}

PlacementConfig load_placement(const Deck& deck) {
  PlacementConfig p;
  p.mode = choose(deck, "placement.mode", kPlacementModes);
  p.park = choose(deck, "placement.park", kParkings);
  p.actor = deck.get<int>("placement.actor");
  p.critic = deck.get<int>("placement.critic");
  p.reference = deck.get<int>("placement.reference");
  p.reward = deck.get<int>("placement.reward");
  // -1 is the default ("not given"): a resolved deck spells it out, and must parse back.
  for (const char* k : {"placement.actor", "placement.critic", "placement.reference", "placement.reward"})
    if (deck.given(k) && deck.get<int>(k) < -1) deck.fail(k, "must not be negative");
  return p;
}

DistConfig load_dist(const Deck& deck) {
  DistConfig d;
  d.backend = choose(deck, "dist.backend", kBackends);
  d.device = choose(deck, "dist.device", kDevices);
  d.watchdog_timeout = deck.get<double>("dist.watchdog_timeout");
  if (!(d.watchdog_timeout > 0)) deck.fail("dist.watchdog_timeout", "must be > 0 seconds");
  try {
    d.device_memory = parse_bytes(deck.get<std::string>("dist.device_memory"));
  } catch (const std::invalid_argument& e) {
    deck.fail("dist.device_memory", e.what());
  }
  if (d.backend == Backend::nccl && d.device == DeviceKind::cpu)
    deck.fail("dist.backend", "is nccl, which needs GPUs, but dist.device is cpu");
  return d;
}

// Kinds of reward scored from text on the actor ranks: a rule, the user's program or endpoint.
bool is_text_reward_kind(const std::string& kind) {
  for (const char* prefix : {"rule:", "command:", "http:", "https:"})
    if (kind.rfind(prefix, 0) == 0) return true;
  return false;
}

// [model.reward]'s timeout, start_timeout, retries and retry_delay.
RewardCallConfig load_reward_call(const Deck& deck) {
  RewardCallConfig c;
  c.timeout = deck.get<double>("model.reward.timeout");
  if (!(c.timeout > 0)) deck.fail("model.reward.timeout", "must be > 0 seconds");
  c.start_timeout = deck.get<double>("model.reward.start_timeout");
  if (!(c.start_timeout > 0)) deck.fail("model.reward.start_timeout", "must be > 0 seconds");
  c.retries = deck.get<int>("model.reward.retries");
  if (c.retries < 0) deck.fail("model.reward.retries", "must be >= 0");
  c.retry_delay = deck.get<double>("model.reward.retry_delay");
  if (!(c.retry_delay >= 0)) deck.fail("model.reward.retry_delay", "must be >= 0 seconds");
  return c;
}

// [model.<role>]: where the model comes from, its dtype, its random sizes, its sharding and
// optimizer settings.
ModelSectionConfig load_model(const Deck& deck, const std::string& role) {
  ModelSectionConfig m;
  const std::string sec = "model." + role + ".";
  m.path = m.source = deck.get<std::string>(sec + "path");
  if (is_hf_path(m.path)) {
    try {
      m.path = resolve_hf_path(m.path, deck.get<std::string>("model.hub_cache"));
    } catch (const Error& e) {
      deck.fail(sec + "path", e.what());
    }
  }
  m.kind = deck.get<std::string>(sec + "kind");
  if (m.kind != "model" && !(role == "reward" && is_text_reward_kind(m.kind)))
    deck.fail(sec + "kind", "is '" + m.kind + "'; expected model" +
                                std::string(role == "reward" ? ", rule:<task> (rule:sort_digits, rule:add), "
                                                               "command:<command line> or an http(s):// URL" : ""));
  if (m.kind.rfind("command:", 0) == 0 && m.kind.find_first_not_of(" \t", 8) == std::string::npos)
    deck.fail(sec + "kind", "is '" + m.kind + "': command: needs the command line to run after it");
  if (role == "reward") m.call = load_reward_call(deck);
  m.dtype = deck.get<std::string>(sec + "dtype");
  if (m.dtype != "float32" && m.dtype != "bfloat16" && m.dtype != "float16")
    deck.fail(sec + "dtype", "is '" + m.dtype + "'; expected one of: float32 | bfloat16 | float16");
  const std::string random = "random:";
  if (m.path.rfind(random, 0) == 0) {
    const std::string what = m.path.substr(random.size());
    if (!is_random_family(what) && !is_regular_file(what))
      deck.fail(sec + "path", "is '" + m.path + "': after random: comes a family (" + kRandomFamilies +
                                  ") or a readable config.json, and '" + what + "' is neither");
  } else if (!m.path.empty() && !is_directory(m.path)) {
    deck.fail(sec + "path", "is '" + m.path + "', which is not a directory");
  }
  struct { const char* key; int* value; int min; } sizes[] = {
      {"hidden", &m.hidden, 1}, {"layers", &m.layers, 1}, {"heads", &m.heads, 1},
      {"kv_heads", &m.kv_heads, 0}, {"ffn", &m.ffn, 0}, {"vocab", &m.vocab, 0},
      {"max_positions", &m.max_positions, 1}, {"head_dim", &m.head_dim, 0}, {"sliding_window", &m.sliding_window, 0}};
  for (auto& s : sizes) {
    *s.value = deck.get<int>(sec + s.key);
    if (*s.value < s.min) deck.fail(sec + s.key, "must be at least " + std::to_string(s.min));
  }
  // A random family that has no such setting is refused rather than built without it.
  const std::string family = m.path.rfind(random, 0) == 0 ? m.path.substr(random.size()) : "";
  if (is_random_family(family)) {
    const bool llama_shaped = family == "llama" || family == "mistral" || family == "qwen3";
    if (m.head_dim && !llama_shaped)
      deck.fail(sec + "head_dim", "is " + std::to_string(m.head_dim) + ", but " + m.path +
                                      " has heads of hidden / heads (head_dim is for random:llama | mistral | qwen3)");
    if (m.sliding_window && family != "mistral" && family != "qwen3")
      deck.fail(sec + "sliding_window", "is " + std::to_string(m.sliding_window) + ", but " + m.path +
                                            " has no sliding-window attention (random:mistral | qwen3 have)");
  }
  if (m.head_dim == 0 && m.hidden % m.heads != 0) deck.fail(sec + "heads", "must divide " + sec + "hidden");
  if (m.kv_heads && m.heads % m.kv_heads != 0) deck.fail(sec + "kv_heads", "must divide " + sec + "heads");
  m.checkpointing = deck.get<bool>(sec + "checkpointing");
  m.reshard_after_forward = deck.get<bool>(sec + "reshard_after_forward");
  m.offload_optimizer = deck.get<bool>(sec + "offload_optimizer");
  m.offload_params = deck.get<bool>(sec + "offload_params");
  m.lr = deck.get<double>(sec + "lr");
  if (!(m.lr > 0)) deck.fail(sec + "lr", "must be > 0");
  m.weight_decay = deck.get<double>(sec + "weight_decay");
  if (!(m.weight_decay >= 0)) deck.fail(sec + "weight_decay", "must be >= 0");
  return m;
}

// rollout.decode_rows, kv_block and kv_cache_tokens (after max_prompt_tokens, max_new_tokens and
// reuse_prompt_cache).
void load_paged_cache(const Deck& deck, RolloutConfig& r) {
  r.decode_rows = deck.get<int>("rollout.decode_rows");
  if (r.decode_rows < 0) deck.fail("rollout.decode_rows", "must be >= 0");
  r.kv_block = deck.get<int>("rollout.kv_block");
  if (r.kv_block < 1) deck.fail("rollout.kv_block", "must be at least 1");
  r.kv_cache_tokens = deck.get<int>("rollout.kv_cache_tokens");
  const int sequence = r.max_prompt_tokens + r.max_new_tokens;
  if (r.kv_cache_tokens != 0 && r.kv_cache_tokens < sequence)
    deck.fail("rollout.kv_cache_tokens", "must be 0 or at least max_prompt_tokens + max_new_tokens (" +
                                             std::to_string(sequence) + "), the slots of one whole sequence");
  if (r.decode_rows > 0 && r.reuse_prompt_cache)
    deck.fail("rollout.decode_rows", "cannot be combined with rollout.reuse_prompt_cache = true: the paged cache is "
                                     "not handed to the old log-probs' pass");
}

RolloutConfig load_rollout(const Deck& deck) {
  RolloutConfig r;
  r.prompts = deck.get<std::string>("rollout.prompts");
  if (!r.prompts.empty() && !is_regular_file(r.prompts))
    deck.fail("rollout.prompts", "is '" + r.prompts + "', which is not a readable file");
  r.prompt_field = deck.get<std::string>("rollout.prompt_field");
  const std::pair<const char*, int*> counts[] = {{"batch", &r.batch}, {"max_prompt_tokens", &r.max_prompt_tokens},
                                                 {"max_new_tokens", &r.max_new_tokens}};
  for (const auto& [key, value] : counts) {
    *value = deck.get<int>(std::string("rollout.") + key);
    if (*value < 1) deck.fail(std::string("rollout.") + key, "must be at least 1");
  }
  const std::pair<const char*, int*> optional_counts[] = {
      {"micro_batch", &r.micro_batch}, {"score_micro_batch", &r.score_micro_batch}, {"score_tokens", &r.score_tokens},
      {"top_k", &r.top_k}};
  for (const auto& [key, value] : optional_counts) {
    *value = deck.get<int>(std::string("rollout.") + key);
    if (*value < 0) deck.fail(std::string("rollout.") + key, "must be >= 0");
  }
  r.reuse_prompt_cache = deck.get<bool>("rollout.reuse_prompt_cache");
  load_paged_cache(deck, r);
  r.min_new_tokens = deck.get<int>("rollout.min_new_tokens");
  if (r.min_new_tokens < 0 || r.min_new_tokens > r.max_new_tokens)
    deck.fail("rollout.min_new_tokens", "must be in 0 .. rollout.max_new_tokens (" + std::to_string(r.max_new_tokens) + ")");
  r.temperature = deck.get<double>("rollout.temperature");
  if (!(r.temperature >= 0)) deck.fail("rollout.temperature", "must be >= 0");
  r.top_p = deck.get<double>("rollout.top_p");
  if (!(r.top_p > 0 && r.top_p <= 1)) deck.fail("rollout.top_p", "must be in (0, 1]");
  r.stop = split_list(deck.get<std::string>("rollout.stop"));
  return r;
}

TrainConfig load_train(const Deck& deck) {
  TrainConfig t;
  t.micro_batch = deck.get<int>("train.micro_batch");
  if (t.micro_batch < 1) deck.fail("train.micro_batch", "must be at least 1");
  t.micro_batch_tokens = deck.get<int>("train.micro_batch_tokens");
  if (t.micro_batch_tokens < 0) deck.fail("train.micro_batch_tokens", "must be >= 0");
  t.max_grad_norm = deck.get<double>("train.max_grad_norm");
  if (!(t.max_grad_norm >= 0)) deck.fail("train.max_grad_norm", "must be >= 0");
  t.adam_beta1 = deck.get<double>("train.adam_beta1");
  t.adam_beta2 = deck.get<double>("train.adam_beta2");
  for (const char* k : {"train.adam_beta1", "train.adam_beta2"})
    if (!(deck.get<double>(k) >= 0 && deck.get<double>(k) < 1)) deck.fail(k, "must be in [0, 1)");
  t.adam_eps = deck.get<double>("train.adam_eps");
  if (!(t.adam_eps > 0)) deck.fail("train.adam_eps", "must be > 0");
  t.reduce_dtype = choose(deck, "train.reduce_dtype", kReducePrecisions);
  t.warmup = deck.get<int>("train.warmup");
  if (t.warmup < 0) deck.fail("train.warmup", "must be >= 0");
  t.schedule = choose(deck, "train.schedule", kSchedules);
  t.min_lr_ratio = deck.get<double>("train.min_lr_ratio");
  if (!(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1)) deck.fail("train.min_lr_ratio", "must be in [0, 1]");
  t.cuda_graphs = deck.get<bool>("train.cuda_graphs");
  return t;
}

OutputConfig load_output(const Deck& deck) {
  OutputConfig o;
  o.sample_every = deck.get<int>("output.sample_every");
  if (o.sample_every < 0) deck.fail("output.sample_every", "must be >= 0");
  o.rollouts_every = deck.get<int>("output.rollouts_every");
  if (o.rollouts_every < 0) deck.fail("output.rollouts_every", "must be >= 0");
  return o;
}

// The KL penalty's settings.
void load_kl(const Deck& deck, AlgorithmConfig& a) {
  a.kl_coef = deck.get<double>("algorithm.kl_coef");
  if (!(a.kl_coef >= 0)) deck.fail("algorithm.kl_coef", "must be >= 0");
  if (deck.get<std::string>("algorithm.kl_estimator") != "auto") {
    const std::string value = deck.get<std::string>("algorithm.kl_estimator");
    for (const auto& n : kKlEstimators)
      if (value == n.name) a.kl_estimator = a.kl_loss_estimator = n.value;
    if (value != name_of(a.kl_estimator))
      deck.fail("algorithm.kl_estimator", "is '" + value + "'; expected one of: auto | " + choices(kKlEstimators));
  }
  a.kl_controller = choose(deck, "algorithm.kl_controller", kKlControllers);
  a.kl_target = deck.get<double>("algorithm.kl_target");
  if (!(a.kl_target > 0)) deck.fail("algorithm.kl_target", "must be > 0");
  a.kl_horizon = deck.get<double>("algorithm.kl_horizon");
  if (!(a.kl_horizon > 0)) deck.fail("algorithm.kl_horizon", "must be > 0");
}

// The policy loss's shape: its ratio, its clip range, dual clip, aggregation, GRPO's scaling.
void load_policy_loss(const Deck& deck, AlgorithmConfig& a) {
  a.policy_loss = choose(deck, "algorithm.policy_loss", kPolicyLosses);
  a.clip_low = deck.get<double>("algorithm.clip_low");
  if (!(a.clip_low >= 0 && a.clip_low < 1)) deck.fail("algorithm.clip_low", "must be in [0, 1) (0 = algorithm.clip_eps)");
  a.clip_high = deck.get<double>("algorithm.clip_high");
  if (!(a.clip_high >= 0)) deck.fail("algorithm.clip_high", "must be >= 0 (0 = algorithm.clip_eps)");
  if (a.clip_low == 0) a.clip_low = a.clip_eps;
  if (a.clip_high == 0) a.clip_high = a.clip_eps;
  a.clip_ratio_c = deck.get<double>("algorithm.clip_ratio_c");
  if (!(a.clip_ratio_c == 0 || a.clip_ratio_c > 1))
    deck.fail("algorithm.clip_ratio_c", "must be 0 (off) or > 1: the dual clip bounds the loss of a negative-advantage "
                                        "token at clip_ratio_c * |A|, above the ordinary clip's (1 + clip_high) * |A| only when > 1");
  a.loss_agg_mode = choose(deck, "algorithm.loss_agg_mode", kLossAggs);
  a.loss_agg_norm = deck.get<double>("algorithm.loss_agg_norm");
  if (!(a.loss_agg_norm >= 0)) deck.fail("algorithm.loss_agg_norm", "must be >= 0 (0 = rollout.max_new_tokens)");
  a.norm_adv_by_std = deck.get<bool>("algorithm.norm_adv_by_std");
}

// What happens to the samples before the advantages: dynamic sampling, overlong filter and penalty.
void load_recipe_sampling(const Deck& deck, AlgorithmConfig& a) {
  a.dynamic_sampling = deck.get<bool>("algorithm.dynamic_sampling");
  a.dynamic_sampling_max_rounds = deck.get<int>("algorithm.dynamic_sampling_max_rounds");
  if (a.dynamic_sampling_max_rounds < 1) deck.fail("algorithm.dynamic_sampling_max_rounds", "must be at least 1");
  if (a.dynamic_sampling && a.samples_per_prompt < 2)
    deck.fail("algorithm.dynamic_sampling", "needs algorithm.samples_per_prompt >= 2 (it drops prompts whose samples all "
                                            "score the same)");
  a.overlong_filter = deck.get<bool>("algorithm.overlong_filter");
  a.overlong_buffer = deck.get<int>("algorithm.overlong_buffer");
  if (a.overlong_buffer < 0) deck.fail("algorithm.overlong_buffer", "must be >= 0 (0 = no overlong penalty)");
  a.overlong_penalty_factor = deck.get<double>("algorithm.overlong_penalty_factor");
  if (!(a.overlong_penalty_factor >= 0)) deck.fail("algorithm.overlong_penalty_factor", "must be >= 0");
}

AlgorithmConfig load_algorithm(const Deck& deck) {
  AlgorithmConfig a;
  a.algorithm = choose(deck, "algorithm.name", kAlgorithms);
  load_kl(deck, a);
  // Coefficients that are fractions, or non-negative, or positive.
  const std::pair<const char*, double*> unit[] = {{"gamma", &a.gamma}, {"lambda", &a.lambda}};
  for (const auto& [key, value] : unit) {
    *value = deck.get<double>(std::string("algorithm.") + key);
    if (!(*value >= 0 && *value <= 1)) deck.fail(std::string("algorithm.") + key, "must be in [0, 1]");
  }
  const std::pair<const char*, double*> non_negative[] = {
      {"value_clip", &a.value_clip}, {"entropy_coef", &a.entropy_coef}, {"reward_clip", &a.reward_clip}};
  for (const auto& [key, value] : non_negative) {
    *value = deck.get<double>(std::string("algorithm.") + key);
    if (!(*value >= 0)) deck.fail(std::string("algorithm.") + key, "must be >= 0");
  }
  const std::pair<const char*, double*> positive[] = {{"clip_eps", &a.clip_eps}, {"value_coef", &a.value_coef}};
  for (const auto& [key, value] : positive) {
    *value = deck.get<double>(std::string("algorithm.") + key);
    if (!(*value > 0)) deck.fail(std::string("algorithm.") + key, "must be > 0");
  }
  a.epochs = deck.get<int>("algorithm.epochs");
  if (a.epochs < 1) deck.fail("algorithm.epochs", "must be at least 1");
  a.minibatch = deck.get<int>("algorithm.minibatch");
  if (a.minibatch < 1) deck.fail("algorithm.minibatch", "must be at least 1");
  a.normalize_rewards = deck.get<bool>("algorithm.normalize_rewards");
  a.whiten_advantages = deck.get<bool>("algorithm.whiten_advantages");
  a.samples_per_prompt = deck.get<int>("algorithm.samples_per_prompt");
  if (a.samples_per_prompt < 1) deck.fail("algorithm.samples_per_prompt", "must be at least 1");
  const bool grouped = a.algorithm == Algorithm::grpo || a.algorithm == Algorithm::rloo ||
                       a.algorithm == Algorithm::reinforce_pp_baseline;
  if (grouped && a.samples_per_prompt < 2)
    deck.fail("algorithm.samples_per_prompt", "must be at least 2 for " + std::string(name_of(a.algorithm)) +
                                                  " (its baseline comes from the other samples of a prompt)");
  load_policy_loss(deck, a);
  load_recipe_sampling(deck, a);
  return a;
}

// The [eval] keys; the rollout's max_new_tokens bounds the eval's (the memory plan, the width
// buckets and the models' positions are sized by it).
EvalConfig load_eval(const Deck& deck) {
  EvalConfig e;
  e.prompts = deck.get<std::string>("eval.prompts");
  if (e.prompts.empty()) {
    // A key set away from its default means evaluation was wanted. (Defaults spelled out, as a
    // resolved deck spells them, are fine.)
    const std::pair<const char*, bool> changed[] = {
        {"eval.prompt_field", !deck.get<std::string>("eval.prompt_field").empty()},
        {"eval.every", deck.get<int>("eval.every") != e.every},
        {"eval.at_start", deck.get<bool>("eval.at_start") != e.at_start},
        {"eval.at_end", deck.get<bool>("eval.at_end") != e.at_end},
        {"eval.count", deck.get<int>("eval.count") != e.count},
        {"eval.samples", deck.get<int>("eval.samples") != e.samples},
        {"eval.k", !deck.get<std::string>("eval.k").empty()},
        {"eval.temperature", deck.get<double>("eval.temperature") != e.temperature},
        {"eval.max_new_tokens", deck.get<int>("eval.max_new_tokens") != e.max_new_tokens},
        {"eval.pass_threshold", deck.get<double>("eval.pass_threshold") != e.pass_threshold},
        {"eval.reward", !deck.get<std::string>("eval.reward").empty()}};
    for (const auto& [key, differs] : changed)
      if (differs) deck.fail(key, "is set, but eval.prompts is not: name the held-out prompts file to evaluate on");
    return e;
  }
  if (!is_regular_file(e.prompts)) deck.fail("eval.prompts", "is '" + e.prompts + "', which is not a readable file");
  e.prompt_field = deck.get<std::string>("eval.prompt_field");
  if (e.prompt_field.empty()) e.prompt_field = deck.get<std::string>("rollout.prompt_field");
  const std::pair<const char*, int*> counts[] = {
      {"every", &e.every}, {"count", &e.count}, {"samples", &e.samples}, {"max_new_tokens", &e.max_new_tokens}};
  for (const auto& [key, value] : counts) {
    *value = deck.get<int>(std::string("eval.") + key);
    if (*value < 0) deck.fail(std::string("eval.") + key, "must be >= 0");
  }
  e.reward = deck.get<std::string>("eval.reward");
  if (e.reward == "model")
    deck.fail("eval.reward", "is model: the reward model grades the evaluation when it is the run's reward (leave "
                             "eval.reward out); eval.reward names a text reward instead");
  e.at_start = deck.get<bool>("eval.at_start");
  e.at_end = deck.get<bool>("eval.at_end");
  if (e.every == 0 && !e.at_end && !e.at_start)
    deck.fail("eval.at_end", "is false, and eval.every is 0 and eval.at_start false: the run would never evaluate");
  const int rollout_max = deck.get<int>("rollout.max_new_tokens");
  if (e.max_new_tokens == 0) e.max_new_tokens = rollout_max;
  if (e.max_new_tokens > rollout_max)
    deck.fail("eval.max_new_tokens", "is " + std::to_string(e.max_new_tokens) +
                                         ", more than rollout.max_new_tokens = " + std::to_string(rollout_max) +
                                         " (the memory plan and the models' positions are sized by the rollout's): "
                                         "raise that one");
  for (const std::string& item : split_list(deck.get<std::string>("eval.k"))) {
    size_t used = 0;
    int k = 0;
    try {
      k = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || k < 1)
      deck.fail("eval.k", "holds '" + item + "'; expected comma-separated whole numbers >= 1");
    if (k > e.samples)
      deck.fail("eval.k", "asks for pass@" + item + ", which needs eval.samples >= " + item + " (it is " +
                              std::to_string(e.samples) + ")");
    if (std::find(e.k.begin(), e.k.end(), k) == e.k.end()) e.k.push_back(k);
  }
  std::sort(e.k.begin(), e.k.end());
  e.temperature = deck.get<double>("eval.temperature");
  if (!(e.temperature > 0)) deck.fail("eval.temperature", "must be > 0 (greedy pass@1 is measured anyway)");
  e.pass_threshold = deck.get<double>("eval.pass_threshold");  // the deck refuses nan and inf
  return e;
}

}  // namespace

void refuse_other_stages(const Config& config, const std::string& command) {
  const std::pair<const char*, bool> stages[] = {
      {"sft", config.sft.enabled()}, {"rm", config.rm.enabled()}, {"dpo", config.dpo.enabled()}};
  for (const auto& [stage, set] : stages)
    if (set && command != stage)
      config.deck.fail(std::string(stage) + ".data", std::string("is set: this is a deck of quartet ") + stage +
                                                         " DECK, and quartet " + command + " does not read [" + stage + "]");
}

Config load_config(const Deck& deck) {
  Config c{deck,
           load_run(deck),
           load_placement(deck),
           load_dist(deck),
           load_model(deck, "actor"),
           load_model(deck, "critic"),
           load_model(deck, "reference"),
           load_model(deck, "reward"),
           load_rollout(deck),
           load_train(deck),
           load_algorithm(deck),
           load_output(deck),
           load_checkpoint(deck),
           load_kernels_config(deck),
           load_profile_config(deck),
           load_reward_config(deck),
           load_eval(deck),
           load_sft_config(deck),
           load_dpo_config(deck),
           load_rm_config(deck)};
  c.placement.needs_actor = !c.rm.enabled();
  return c;
}

}  // namespace quartet
