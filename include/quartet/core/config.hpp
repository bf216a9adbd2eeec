#pragma once
// Typed configuration, one struct per deck section. Nothing under src/ reads the deck except
// through these. Each section's keys, defaults and units are declared once, in config.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

#include "quartet/core/deck.hpp"
#include "quartet/core/dpo_config.hpp"      // DpoConfig ([dpo])
#include "quartet/core/duration.hpp"
#include "quartet/core/kernels_config.hpp"  // KernelsConfig ([kernels]), ProfileConfig ([profile])
#include "quartet/core/reward_config.hpp"   // RewardConfig ([reward])
#include "quartet/core/rm_config.hpp"       // RmConfig ([rm])
#include "quartet/core/sft_config.hpp"      // SftConfig ([sft])

namespace quartet {

struct RunConfig {              // [run]
  std::string name = "quartet"; // run name, shown in logs and the run file
  std::string out = "runs/quartet";  // output directory
  std::uint64_t seed = 1;       // base random seed
  int iterations = 1;           // iterations of the command's main loop
  // Wall-clock budget in seconds (0 = none): train checkpoints and exits (status 75, to be
  // resubmitted) when the next iteration and a checkpoint might not fit in what is left.
  // Deck: seconds, or e.g. "90m", "23h30m", "1h5m30s"; also `train --time-limit`.
  double time_limit = 0;
};

// The settings with a fixed set of values, typed when the deck is loaded (name_of gives the
// deck's spelling back).
enum class PlacementMode { disjoint, colocated };
enum class Parking { automatic, always, never };   // placement.park: auto | always | never
enum class Backend { automatic, nccl, mpi };       // dist.backend: auto | nccl | mpi
enum class DeviceKind { automatic, cuda, cpu };    // dist.device: auto | cuda | cpu
enum class ReducePrecision { float32, model };     // train.reduce_dtype
enum class LrSchedule { constant, linear, cosine };
enum class OnDamaged { refuse, start_over };       // checkpoint.on_damaged
const char* name_of(PlacementMode value);
const char* name_of(Parking value);
const char* name_of(Backend value);
const char* name_of(DeviceKind value);
const char* name_of(ReducePrecision value);
const char* name_of(LrSchedule value);
const char* name_of(OnDamaged value);

struct PlacementConfig {        // [placement]
  PlacementMode mode = PlacementMode::disjoint;
  // Ranks per role. -1 = not given: 0 in disjoint mode, every rank in colocated mode.
  int actor = -1, critic = -1, reference = -1, reward = -1;
  // Colocated: whether the idle models' parameter and gradient shards move to host memory
  // while another model works. auto = only when the memory plan does not fit without it.
  Parking park = Parking::automatic;
  // Not a key: whether the layout must give the actor ranks. false for a deck of a stage that
  // trains another role alone (an rm deck, rm.data set: the reward model on every rank).
  bool needs_actor = true;
};

struct DistConfig {             // [dist]
  Backend backend = Backend::automatic;
  DeviceKind device = DeviceKind::automatic;
  double watchdog_timeout = 600;  // seconds a collective or exchange may take before abort
  // Memory of one device in bytes, for the memory plan; 0 = ask the device (GPU) or the host
  // (CPU runs: physical memory shared by the ranks of the node). Deck: "auto" or e.g. "80GiB".
  std::uint64_t device_memory = 0;
};

// The families a random:<family> path may name, as the deck and --help spell them.
constexpr const char* kRandomFamilies = "llama | mistral | qwen3 | gpt2 | gptj | gpt_neox";
bool is_random_family(const std::string& family);

// How quartet calls a reward in the user's own code: model.reward.kind = command:... (a
// program, rl/rewards/reward_program.hpp) or http://... (an endpoint, rl/rewards/reward_endpoint.hpp).
struct RewardCallConfig {
  double timeout = 60;          // seconds one batch may take: the program's reply, one HTTP attempt
  double start_timeout = 300;   // command: seconds to start and answer the first, empty request
  int retries = 3;              // http: further attempts after a connection error
  double retry_delay = 1;       // http: seconds before the first retry, doubled for each next one
};

struct ModelSectionConfig {     // [model.actor], [model.critic], [model.reference], [model.reward]
  // A Hugging Face model directory; or random:FILE.json (that config.json, random weights); or
  // random:<family> (kRandomFamilies, random weights, sized by the keys below).
  // "" = not set. An hf:ORG/NAME[@REVISION] path is resolved when the deck is loaded, to the
  // snapshot directory in the local hub cache (core/hf_cache.hpp); `source` keeps what the deck said.
  std::string path;
  std::string source;
  // reward only: "model" (the reward model at path) or "rule:<task>", a built-in verifiable
  // reward (rl/rewards/rule_rewards.hpp: rule:sort_digits, rule:add), which needs no model and no ranks;
  // or the user's code, scored on the actor ranks too: "command:<command line>" or an
  // http:// | https:// URL ("http:<URL>" also reads as the URL).
  std::string kind = "model";
  RewardCallConfig call;          // reward only: for command: and http: kinds
  std::string dtype = "float32";  // float32 | bfloat16 | float16: parameters and compute
  // Sizes of a random:<family> model (ignored otherwise).
  int hidden = 64, layers = 2, heads = 4, kv_heads = 0 /* 0 = heads */, ffn = 0 /* 0 = family default */;
  int vocab = 0 /* 0 = the tokenizer's (built-in demo: its character vocabulary) */, max_positions = 256;
  int head_dim = 0;        // llama-shaped families: 0 = hidden / heads
  int sliding_window = 0;  // random:mistral, random:qwen3: every layer's attention window (0 = none)
  bool checkpointing = false;     // activation checkpointing per block (recompute in backward)
  // false: gathered blocks stay through the backward and the step's later micro-batches (one
  // all-gather of each per optimizer step, the whole model's parameters in memory meanwhile)
  bool reshard_after_forward = true;
  bool offload_optimizer = false; // fp32 master weights and AdamW moments in pinned host memory, step on the CPU
  bool offload_params = false;    // the compute-dtype parameter shards in pinned host memory
  double lr = 1e-6;               // AdamW learning rate (trained roles: actor, critic)
  double weight_decay = 0.0;      // AdamW decoupled weight decay (not applied to biases and norms)
};

// The algorithms of `train` (rl/algorithm.hpp says what each is made of).
enum class Algorithm { ppo, grpo, rloo, reinforce_pp, reinforce_pp_baseline };
// Schulman's estimators of KL(actor || reference) per token (rl/advantages.hpp).
enum class KlEstimator { k1, k2, k3 };
enum class KlControl { fixed, adaptive };  // adaptive: Ziegler et al. 2019
// The policy's surrogate (rl/losses.hpp): PPO's per-token ratio, or GSPO's per-sequence one.
enum class PolicyLossKind { ppo, gspo };
// How the per-token terms of the policy loss become one number (rl/losses.hpp), as verl's
// loss_agg_mode names them.
enum class LossAgg { token_mean, seq_mean_token_mean, seq_mean_token_sum_norm };
// The deck's spelling of each value: "ppo", "reinforce++", "k3", "adaptive", "token-mean".
const char* name_of(Algorithm value);
const char* name_of(KlEstimator value);
const char* name_of(KlControl value);
const char* name_of(PolicyLossKind value);
const char* name_of(LossAgg value);

struct AlgorithmConfig {        // [algorithm]
  Algorithm algorithm = Algorithm::ppo;  // algorithm.name
  double kl_coef = 0.05;        // initial KL penalty coefficient (beta)
  // algorithm.kl_estimator: the KL in the reward and in the logs (kl_estimator), and GRPO's KL
  // loss term (kl_loss_estimator). The deck's "auto" (the default) is k1 for the first and k3
  // for the second, each what OpenRLHF and verl use there; k1 | k2 | k3 sets both.
  KlEstimator kl_estimator = KlEstimator::k1;
  KlEstimator kl_loss_estimator = KlEstimator::k3;
  KlControl kl_controller = KlControl::fixed;
  double kl_target = 6.0;       // adaptive: target KL per sequence
  double kl_horizon = 10000;    // adaptive: samples over which the coefficient adapts
  double gamma = 1.0, lambda = 0.95;  // GAE discount and lambda (ppo), discount (reinforce++)
  double clip_eps = 0.2;        // PPO policy ratio clip
  // The ratio's clip range [1 - clip_low, 1 + clip_high]; the deck's 0 = clip_eps (resolved when
  // loaded). DAPO's clip-higher: clip_high > clip_low.
  double clip_low = 0.2, clip_high = 0.2;
  double clip_ratio_c = 0;      // dual-clip PPO: negative-advantage tokens' loss capped at c |A| (0 = off; > 1)
  PolicyLossKind policy_loss = PolicyLossKind::ppo;
  LossAgg loss_agg_mode = LossAgg::token_mean;
  double loss_agg_norm = 0;     // seq-mean-token-sum-norm's constant (0 = rollout.max_new_tokens)
  bool norm_adv_by_std = true;  // grpo: divide by the group's std (false: Dr. GRPO)
  double value_clip = 0.2;      // PPO value clip (0 = off)
  double value_coef = 1.0;      // the critic's loss is multiplied by this (the critic has its own optimizer)
  double entropy_coef = 0.0;    // entropy bonus (the entropy metric is computed either way)
  int epochs = 1;               // passes over each rollout batch
  int minibatch = 8;            // sequences per optimizer step and rank
  double reward_clip = 10.0;    // scores clipped to [-c, c] after normalisation (0 = off)
  bool normalize_rewards = false;  // scores divided by a running std (and centred)
  bool whiten_advantages = true;   // advantages whitened over the actor group's batch (ppo, reinforce++, reinforce++-baseline)
  int samples_per_prompt = 1;   // completions per prompt (grpo, rloo and reinforce++-baseline need >= 2)
  // DAPO's dynamic sampling: prompt groups whose samples all score the same are dropped and more
  // prompts are generated until rollout.batch groups are kept, in at most this many rounds.
  bool dynamic_sampling = false;
  int dynamic_sampling_max_rounds = 10;
  // Truncated samples (no stop token within rollout.max_new_tokens) count nothing in the loss.
  bool overlong_filter = false;
  // DAPO's soft overlong penalty: a completion longer than rollout.max_new_tokens - buffer
  // loses factor * (length - that) / buffer of its score (0 = off).
  int overlong_buffer = 0;
  double overlong_penalty_factor = 1.0;
};

struct TrainConfig {            // [train]
  int micro_batch = 4;          // sequences per forward/backward pass and rank
  double max_grad_norm = 1.0;   // clip the global gradient norm (0 = off)
  double adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8;
  ReducePrecision reduce_dtype = ReducePrecision::float32;  // gradients reduce-scattered in float32 or the model's dtype
  int warmup = 0;               // learning-rate warm-up, optimizer steps
  LrSchedule schedule = LrSchedule::constant;  // decay after warm-up
  double min_lr_ratio = 0.1;    // the decayed learning rate's floor, as a fraction of lr
  bool cuda_graphs = true;      // a one-rank GPU model's micro-batches as CUDA graphs
  // quartet train's updates: micro-batches of sequences packed back to back without padding,
  // up to this many tokens each (0 = micro_batch padded sequences); engine/packed_rollouts.hpp.
  int micro_batch_tokens = 0;
};

struct RolloutConfig {          // [rollout]
  std::string prompts;          // JSONL file, one {"prompt": "..."} per line, or pre-tokenised HDF5
  std::string prompt_field = "prompt";  // the JSONL field holding the prompt text
  int batch = 8;                // prompts per generation batch and rank
  int micro_batch = 0;          // prompts per generation chunk (0 = the whole batch): chunk c is
                                // scored by the other groups while chunk c + 1 is generated
  int score_micro_batch = 0;    // sequences per scoring forward and rank (0 = a whole chunk, as
                                // the memory plan counts it); OpenRLHF's micro_rollout_batch_size
  int score_tokens = 0;         // packed scoring: sequences back to back without padding, up to
                                // this many tokens a pass and rank (0 = score_micro_batch rows)
  int max_prompt_tokens = 128;  // longest prompt, in tokens (sizes the KV cache and the plan)
  int max_new_tokens = 16;
  int min_new_tokens = 0;       // no stop token (EOS included) before this many new tokens
  double temperature = 1.0;     // 0 = greedy
  int top_k = 0;                // 0 = off
  double top_p = 1.0;           // 1 = off
  std::vector<std::string> stop;  // stop tokens (token strings); the tokenizer's EOS always stops
  // The actor's old log-probs continue from generation's KV cache (the prompt is not run a
  // second time; engine/experience.hpp score_logprobs_on_cache) instead of a full forward pass.
  // Faster; the log-probs then differ from the full pass's by rounding, and share the
  // sampler's rounding on the prompt (docs/training.md: "Old log-probs on generation's cache").
  bool reuse_prompt_cache = false;
  // Continuous batching over a paged KV cache (model/paged_generation.hpp; docs/generation.md):
  // at most decode_rows sequences decode at once and a finished one's row takes the next
  // waiting sequence (0 = every sequence of a chunk at once, over a contiguous cache); the
  // cache is a pool of kv_cache_tokens slots (0 = decode_rows sequences of max_prompt_tokens +
  // max_new_tokens) in blocks of kv_block slots, shared by a prompt's samples.
  int decode_rows = 0;
  int kv_block = 16;
  int kv_cache_tokens = 0;
};

struct OutputConfig {           // [output]
  int sample_every = 0;         // print one sampled completion every N iterations (0 = never)
  int rollouts_every = 10;      // store the rollouts in the run file every N iterations (0 = never)
};

struct CheckpointConfig {       // [checkpoint]
  int every = 0;                // a checkpoint every N iterations (0 = only at the end and on a stop)
  int keep = 2;                 // complete checkpoints kept (the newest N; >= 1)
  int keep_every = 0;           // also keep those whose iteration is a multiple of N (0 = none)
  bool at_end = true;           // a checkpoint after the last iteration
  // auto: continue from the newest complete checkpoint in <run.out>/checkpoints (none: start);
  // never: start from scratch (refused if run.out already holds checkpoints);
  // a step_<N> directory: continue from that one.
  std::string resume = "auto";
  // What resume = auto does when run.out holds checkpoints and none of them is intact:
  // refuse (name each and its fault, exit 2, touch nothing) | start_over (move them aside to
  // checkpoints.damaged-<time>/ and start at iteration 0).
  OnDamaged on_damaged = OnDamaged::refuse;
};

// [eval]: the policy measured on held-out prompts while it trains (rl/evaluator.hpp): greedy
// pass@1, and with samples > 0 the n-sample pass@1 and pass@k, the mean reward and length, through
// the run's reward. Off while prompts is "".
struct EvalConfig {
  std::string prompts;          // held-out prompts file, in any format rollout.prompts reads
  std::string prompt_field;     // plain JSONL field with the prompt text ("" = rollout.prompt_field)
  int every = 0;                // every N iterations (0 = only at the end)
  bool at_start = false;        // also before the first iteration (the series' point 0)
  bool at_end = true;           // after the last iteration
  int count = 0;                // the first N prompts of the file (0 = all)
  int samples = 0;              // completions per prompt for pass@k (0 = greedy only)
  std::vector<int> k;           // pass@k for each (1 <= k <= samples); pass@1 is always reported
  double temperature = 1.0;     // the n-sample part's sampling temperature (> 0)
  int max_new_tokens = 0;       // 0 = rollout.max_new_tokens (and at most that)
  double pass_threshold = 1.0;  // a completion passes when its reward is at least this
  // The reward that grades the evaluation: "" = the run's own (reward.terms or model.reward.kind);
  // else one text reward kind (rl/rewards/reward_terms.hpp), e.g. match for exact-match accuracy while
  // the policy trains against a learnt reward model.
  std::string reward;
  bool enabled() const { return !prompts.empty(); }
};

struct Config {
  Deck deck;  // the parsed deck, for error messages naming key and line
  RunConfig run;
  PlacementConfig placement;
  DistConfig dist;
  ModelSectionConfig actor, critic, reference, reward;
  RolloutConfig rollout;
  TrainConfig train;
  AlgorithmConfig algorithm;
  OutputConfig output;
  CheckpointConfig checkpoint;
  KernelsConfig kernels;
  ProfileConfig profile;
  RewardConfig rewards;  // [reward]: several rewards at once (model.reward above is the reward model)
  EvalConfig eval;
  SftConfig sft;  // [sft]: quartet sft only
  DpoConfig dpo;  // [dpo]: quartet dpo only
  RmConfig rm;    // [rm]: quartet rm only
};

// "80GiB", "40 GB", "512MiB", "1e9", "auto" (= 0) as bytes; throws std::invalid_argument on anything else.
std::uint64_t parse_bytes(const std::string& text);

// Every key a deck may hold, with defaults, units and help.
const boost::program_options::options_description& deck_schema();

// Typed, range-checked configuration. Throws DeckError naming key and line.
Config load_config(const Deck& deck);

// A deck belongs to one command: a set [sft], [rm] or [dpo] data key makes it that stage's deck.
// `command` ("train", "sft", "rm", "dpo") refuses the other stages' sections, naming the key.
void refuse_other_stages(const Config& config, const std::string& command);

}  // namespace quartet
