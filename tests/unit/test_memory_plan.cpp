// The memory plan: model resolution from the deck, exact parameter bytes against real models of
// every family, sharding, offload, checkpointing, colocated against disjoint placement, and the
// refusal of a deck that cannot fit with knobs that are checked to fit.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <set>
#include <sstream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "test_main.hpp"

using namespace quartet;
using quartet::test::error_of;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_memory_plan {

namespace {

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return load_config(Deck("plan.deck", text, overrides, deck_schema()));
}

// A deck with every model random:<family> of the given sizes.
std::string deck_text(const std::string& family, const std::string& placement, const std::string& extra = "",
                      const std::string& sizes = "hidden = 64\nlayers = 3\nheads = 4\n") {
  std::string t = "[placement]\n" + placement + "\n[dist]\ndevice_memory = 80GiB\n";
  for (const char* role : {"actor", "critic", "reward"})
    t += std::string("[model.") + role + "]\npath = random:" + family + "\n" + sizes;
  return t + extra;
}

const RolePlan& role_plan(const MemoryPlan& p, int rank, Role role) {
  for (const auto& r : p.ranks.at(static_cast<size_t>(rank)).roles)
    if (r.role == role) return r;
  throw std::runtime_error(std::string("rank ") + std::to_string(rank) + " holds no " + role_name(role));
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Per-unit parameter counts of a real model on the CPU: root = everything outside the blocks.
std::vector<int64_t> real_unit_counts(const ModelConfig& config, Head head, int64_t* total) {
  Transformer model(config, head);
  const int64_t L = model->config().num_layers;
  std::vector<int64_t> n(static_cast<size_t>(L + 1), 0);
  *total = 0;
  for (const auto& p : model->parameters()) *total += p.numel();
  for (const auto& item : model->named_parameters(true)) {
    size_t unit = 0;
    for (int64_t i = 0; i < L; ++i)
      if (item.key().rfind(model->block_prefix(i), 0) == 0) unit = static_cast<size_t>(i + 1);
    n[unit] += item.value().numel();
  }
  return n;
}

}  // namespace

TEST(ModelSpec, ResolvesRolesHeadsAndDefaults) {
  Config c = parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n"));
  ModelSpec actor = resolve_model(c, Role::actor), ref = resolve_model(c, Role::reference);
  EXPECT_EQ(actor.head, Head::causal_lm);
  EXPECT_TRUE(actor.trained);
  EXPECT_TRUE(actor.random);
  EXPECT_EQ(actor.dir, "");
  EXPECT_EQ(actor.config.hidden_size, 64);
  EXPECT_EQ(actor.config.num_layers, 3);
  EXPECT_EQ(actor.config.vocab_size, builtin_vocab_size());
  EXPECT_EQ(builtin_vocab_size(), static_cast<int64_t>(std::string(kBuiltinAlphabet).size()) + 3);
  // The reference has no path of its own: the actor's model, frozen.
  EXPECT_EQ(ref.head, Head::causal_lm);
  EXPECT_FALSE(ref.trained);
  EXPECT_EQ(ref.config.hidden_size, 64);
  EXPECT_EQ(resolve_model(c, Role::critic).head, Head::token_value);
  EXPECT_EQ(resolve_model(c, Role::reward).head, Head::sequence_reward);
  EXPECT_FALSE(resolve_model(c, Role::reward).trained);
}

TEST(ModelSpec, ReferenceTakesTheActorsDtypeUnlessGiven) {
  const std::string t = "[model.actor]\npath = random:gpt2\ndtype = bfloat16\n";
  EXPECT_EQ(resolve_model(parse(t), Role::reference).dtype, torch::kBFloat16);
  EXPECT_EQ(resolve_model(parse(t + "[model.reference]\ndtype = float16\n"), Role::reference).dtype, torch::kFloat16);
}

TEST(ModelSpec, ErrorsNameTheDeckKey) {
  Config none = parse("[placement]\nactor = 1\n");
  EXPECT_NE(error_of([&] { resolve_model(none, Role::actor); }).find("plan.deck (default): model.actor.path is not set"),
            std::string::npos)
      << error_of([&] { resolve_model(none, Role::actor); });
  EXPECT_NE(error_of([&] { resolve_model(none, Role::reference); }).find("model.reference.path"), std::string::npos);
  EXPECT_FALSE(has_model(none, Role::reward));  // a rule reward
  // A directory without config.json.
  Config dir = parse("[model.actor]\npath = /tmp\n");
  const std::string e = error_of([&] { resolve_model(dir, Role::actor); });
  EXPECT_NE(e.find("plan.deck:2: model.actor.path"), std::string::npos) << e;
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  // Sizes that do not fit together: grouped-query attention in a GPT-shaped model.
  Config bad = parse("[model.actor]\npath = random:gpt2\nhidden = 64\nheads = 4\nkv_heads = 2\n");
  const std::string g = error_of([&] { resolve_model(bad, Role::actor); });
  EXPECT_NE(g.find("plan.deck:2: model.actor.path"), std::string::npos) << g;
  EXPECT_NE(g.find("grouped-query attention"), std::string::npos) << g;
}

// random:mistral and random:qwen3 with their deck keys: a window over every layer, an explicit
// head width; a key the family does not have is refused by name.
TEST(ModelSpec, RandomMistralAndQwen3) {
  const std::string sizes = "hidden = 32\nlayers = 2\nheads = 4\nkv_heads = 2\n";
  ModelSpec m = resolve_model(parse("[model.actor]\npath = random:mistral\n" + sizes + "sliding_window = 5\n"), Role::actor);
  EXPECT_EQ(m.config.model_type, "mistral");
  EXPECT_EQ(m.config.sliding_window, 5);
  EXPECT_EQ(m.config.sliding_layers, (std::vector<bool>{true, true}));
  EXPECT_EQ(m.config.head_dim, 8);
  ModelSpec q = resolve_model(parse("[model.actor]\npath = random:qwen3\n" + sizes + "head_dim = 12\n"), Role::actor);
  EXPECT_EQ(q.config.model_type, "qwen3");
  EXPECT_TRUE(q.config.qk_norm);
  EXPECT_EQ(q.config.head_dim, 12);
  EXPECT_EQ(q.config.sliding_window, 0);
  EXPECT_EQ(q.config.sliding_layers, (std::vector<bool>{false, false}));
  // head_dim lifts the rule that heads divide hidden.
  EXPECT_EQ(resolve_model(parse("[model.actor]\npath = random:qwen3\nhidden = 30\nheads = 4\nhead_dim = 8\n"),
                          Role::actor).config.head_dim, 8);
  auto refused = [&](const std::string& deck, const std::string& needle) {
    const std::string e = error_of([&] { resolve_model(parse(deck), Role::actor); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  refused("[model.actor]\npath = random:llama\nsliding_window = 4\n",
          "plan.deck:3: model.actor.sliding_window is 4, but random:llama has no sliding-window attention");
  refused("[model.actor]\npath = random:gpt2\nhead_dim = 8\n", "plan.deck:3: model.actor.head_dim is 8, but random:gpt2");
  refused("[model.actor]\npath = random:mistral\nsliding_window = -1\n", "model.actor.sliding_window must be at least 0");
  refused("[model.actor]\npath = random:gemma\n", "after random: comes a family (llama | mistral | qwen3 | gpt2 | gptj | gpt_neox)");
}

TEST(MemoryPlan, ParameterBytesAreExactForEveryFamily) {
  for (const char* family : {"llama", "mistral", "qwen3", "gpt2", "gptj", "gpt_neox"}) {
    for (int W : {1, 3}) {
      SCOPED_TRACE(std::string(family) + " W=" + std::to_string(W));
      const std::string placement = "actor = " + std::to_string(W) + "\ncritic = 1\nreward = 1\n";
      Config c = parse(deck_text(family, placement, "", "hidden = 48\nlayers = 3\nheads = 4\nvocab = 101\n"));
      MemoryPlan p = make_memory_plan(c, W + 2);
      for (Role role : {Role::actor, Role::critic, Role::reward}) {
        const ModelSpec& spec = p.specs[static_cast<int>(role)];
        int64_t total = 0;
        auto real = real_unit_counts(spec.config, spec.head, &total);
        EXPECT_EQ(p.unit_params[static_cast<int>(role)], real) << role_name(role);
        int64_t sum = 0;
        for (auto n : real) sum += n;
        EXPECT_EQ(sum, total) << role_name(role);  // every parameter in exactly one unit
        const int w = role == Role::actor ? W : 1;
        int64_t shard = 0;
        for (auto n : real) shard += round_up(n, 16 * w) / w;
        const int rank = role == Role::actor ? 0 : role == Role::critic ? W : W + 1;
        const RolePlan& rp = role_plan(p, rank, role);
        EXPECT_EQ(rp.parameters, total);
        EXPECT_EQ(rp.params, static_cast<uint64_t>(shard * 4));  // float32
        if (role != Role::reward) {
          EXPECT_EQ(rp.grads, static_cast<uint64_t>(shard * 4));
          EXPECT_EQ(rp.master, 0u);  // float32: the parameters are the master weights
          EXPECT_EQ(rp.moments, static_cast<uint64_t>(2 * shard * 4));
        } else {
          EXPECT_EQ(rp.grads + rp.master + rp.moments, 0u);
        }
      }
    }
  }
}

TEST(MemoryPlan, ClosedFormCountsOfGpt2AndLlama) {
  // GPT-2, tied embeddings: wte V h + wpe P h + L (2 LN 4h + attn 4h^2 + 4h + mlp 8h^2 + 5h) + ln_f 2h.
  const int64_t h = 32, L = 2, V = 50, P = 64;
  Config g = parse("[placement]\nactor = 1\n[model.actor]\npath = random:gpt2\nhidden = 32\nlayers = 2\nheads = 2\nvocab = 50\nmax_positions = 64\n");
  MemoryPlan pg = make_memory_plan(g, 1);
  EXPECT_EQ(role_plan(pg, 0, Role::actor).parameters, V * h + P * h + L * (4 * h + 4 * h * h + 4 * h + 8 * h * h + 5 * h) + 2 * h);
  // Llama, untied, GQA 4 heads / 2 kv heads, ffn 40: embed + head 2 V h + L (2h + h*h*2 + 2 h*h/2 + 3 h*ffn) + h.
  Config l = parse("[placement]\nactor = 1\n[model.actor]\npath = random:llama\nhidden = 32\nlayers = 2\nheads = 4\nkv_heads = 2\nffn = 40\nvocab = 50\n");
  MemoryPlan pl = make_memory_plan(l, 1);
  EXPECT_EQ(role_plan(pl, 0, Role::actor).parameters, 2 * V * h + L * (2 * h + 2 * h * h + 2 * (h * h / 2) + 3 * h * 40) + h);
  // Qwen3, head_dim 12: q and o h x 4*12, k and v h x 2*12, q_norm and k_norm 12 each.
  Config q = parse("[placement]\nactor = 1\n[model.actor]\npath = random:qwen3\nhidden = 32\nlayers = 2\nheads = 4\n"
                   "kv_heads = 2\nhead_dim = 12\nffn = 40\nvocab = 50\nsliding_window = 4\n");
  MemoryPlan pq = make_memory_plan(q, 1);
  EXPECT_EQ(role_plan(pq, 0, Role::actor).parameters,
            2 * V * h + L * (2 * h + 2 * h * 48 + 2 * h * 24 + 2 * 12 + 3 * h * 40) + h);
  // bfloat16 parameters: half the bytes, and a float32 master copy of the shard.
  MemoryPlan pb = make_memory_plan(parse("[placement]\nactor = 1\n[model.actor]\npath = random:gpt2\ndtype = bfloat16\n"), 1);
  const RolePlan& b = role_plan(pb, 0, Role::actor);
  EXPECT_EQ(b.master, 2 * b.params);
  EXPECT_EQ(b.grads, 2 * b.params);
}

TEST(MemoryPlan, ShardingDividesThePersistentTerms) {
  const std::string sizes = "hidden = 128\nlayers = 4\nheads = 4\nvocab = 1000\n";
  MemoryPlan one = make_memory_plan(parse(deck_text("llama", "actor = 1\n", "", sizes)), 1);
  MemoryPlan four = make_memory_plan(parse(deck_text("llama", "actor = 4\n", "", sizes)), 4);
  const RolePlan& a1 = role_plan(one, 0, Role::actor);
  for (int r = 0; r < 4; ++r) {
    const RolePlan& a4 = role_plan(four, r, Role::actor);
    EXPECT_EQ(a4.group_size, 4);
    // Padding adds fewer than 16 * W elements per unit.
    const uint64_t slack = 5 * 16 * 4 * 4;
    for (auto [x1, x4] : {std::pair{a1.params, a4.params}, {a1.grads, a4.grads}, {a1.moments, a4.moments}}) {
      EXPECT_GE(4 * x4, x1);
      EXPECT_LE(4 * x4, x1 + slack);
    }
  }
  // All four ranks have one plan, shown once as a range.
  const std::string table = format_plan(four);
  EXPECT_NE(table.find("0-3"), std::string::npos) << table;
}

TEST(MemoryPlan, OffloadMovesTermsToTheHost) {
  Config base_c = parse(deck_text("gptj", "actor = 2\n") , {"model.actor.dtype=bfloat16"});
  MemoryPlan base = make_memory_plan(base_c, 2);
  MemoryPlan off = make_memory_plan(parse(deck_text("gptj", "actor = 2\n"),
                                          {"model.actor.dtype=bfloat16", "model.actor.offload_optimizer=true"}),
                                    2);
  const RolePlan& b = role_plan(base, 0, Role::actor);
  const RolePlan& o = role_plan(off, 0, Role::actor);
  EXPECT_EQ(b.optimizer_at, Where::device);
  EXPECT_EQ(o.optimizer_at, Where::host);
  EXPECT_EQ(b.host, 0u);
  EXPECT_EQ(o.host, o.master + o.moments + o.staging);
  EXPECT_EQ(o.staging, o.grads);
  ASSERT_EQ(b.phases.size(), o.phases.size());
  for (size_t i = 0; i < b.phases.size(); ++i)
    EXPECT_EQ(b.phases[i].device_bytes() - o.phases[i].device_bytes(), b.master + b.moments) << b.phases[i].name;

  MemoryPlan par = make_memory_plan(parse(deck_text("gptj", "actor = 2\n"),
                                          {"model.actor.dtype=bfloat16", "model.actor.offload_params=true"}),
                                    2);
  const RolePlan& p = role_plan(par, 0, Role::actor);
  EXPECT_EQ(p.params_at, Where::host);
  EXPECT_EQ(p.host, p.params);
  for (size_t i = 0; i < b.phases.size(); ++i)  // the shard leaves; staging for two blocks may come
    EXPECT_LT(par.ranks[0].roles[0].phases[i].device_bytes(), b.phases[i].device_bytes() + b.params);
  EXPECT_LT(p.peak, b.peak);
}

TEST(MemoryPlan, CheckpointingLowersActivations) {
  const std::string sizes = "hidden = 64\nlayers = 6\nheads = 4\n";
  const std::string extra = "[rollout]\nmax_prompt_tokens = 96\nmax_new_tokens = 32\n";
  for (const char* family : {"llama", "gpt2", "gptj", "gpt_neox"}) {
    SCOPED_TRACE(family);
    MemoryPlan plain = make_memory_plan(parse(deck_text(family, "actor = 1\ncritic = 1\n", extra, sizes)), 2);
    MemoryPlan ckpt = make_memory_plan(parse(deck_text(family, "actor = 1\ncritic = 1\n", extra, sizes),
                                             {"model.actor.checkpointing=true", "model.critic.checkpointing=true"}),
                                       2);
    for (auto [rank, role] : {std::pair{0, Role::actor}, {1, Role::critic}}) {
      EXPECT_LT(role_plan(ckpt, rank, role).activations, role_plan(plain, rank, role).activations);
      // More tokens per micro-batch, more activations.
    }
    MemoryPlan big = make_memory_plan(parse(deck_text(family, "actor = 1\ncritic = 1\n", extra, sizes),
                                            {"train.micro_batch=8"}),
                                      2);
    EXPECT_GT(role_plan(big, 1, Role::critic).activations, role_plan(plain, 1, Role::critic).activations);
  }
}

// The rollouts are sequences, each prompt sampled algorithm.samples_per_prompt times: the
// score phases count 8 prompts x 4 samples as 16 x 2, and more than 8 x 2. Generation holds
// the same cache for both, but runs the prompt's pass once per prompt, so 8 x 4 holds less
// than 16 x 2 and more than 8 x 2.
TEST(MemoryPlan, SamplesPerPromptMultiplyTheRollouts) {
  const std::string sizes = "hidden = 64\nlayers = 4\nheads = 4\n";
  auto plan = [&](int prompts, int samples) {
    return make_memory_plan(parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n", "", sizes),
                                  {"rollout.batch=" + std::to_string(prompts),
                                   "algorithm.samples_per_prompt=" + std::to_string(samples)}),
                            4);
  };
  const MemoryPlan a = plan(8, 4), b = plan(16, 2), c = plan(8, 2);
  for (auto [rank, role] : {std::pair{0, Role::actor}, {1, Role::critic}, {2, Role::reference}, {3, Role::reward}}) {
    const RolePlan &pa = role_plan(a, rank, role), &pb = role_plan(b, rank, role), &pc = role_plan(c, rank, role);
    ASSERT_EQ(pa.phases.size(), pc.phases.size());
    for (size_t i = 0; i < pa.phases.size(); ++i) {
      const std::string& name = pa.phases[i].name;
      if (name == "score") {
        EXPECT_EQ(pa.phases[i].device_bytes(), pb.phases[i].device_bytes()) << name;
      }
      if (name == "generate") {
        EXPECT_LT(pa.phases[i].device_bytes(), pb.phases[i].device_bytes()) << name;
      }
      if (name == "score" || name == "generate") {
        EXPECT_GT(pa.phases[i].device_bytes(), pc.phases[i].device_bytes()) << name;
      }
    }
  }
}

// Generation holds one chunk (rollout.micro_batch prompts) at a time and a scoring pass reads
// rollout.score_micro_batch rows: 16 prompts in chunks of 4 plan every term of the generate
// and score phases as 4 prompts do, and scoring 8 rows a pass as a batch of 8 rows does; only
// the rollout exchange (the whole batch) grows with the batch.
TEST(MemoryPlan, MicroBatchesBoundGenerateAndScore) {
  const std::string sizes = "hidden = 64\nlayers = 4\nheads = 4\nvocab = 5000\n";
  auto plan = [&](int prompts, int chunk, int score_rows) {
    return make_memory_plan(parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n", "", sizes),
                                  {"rollout.batch=" + std::to_string(prompts), "algorithm.samples_per_prompt=4",
                                   "rollout.micro_batch=" + std::to_string(chunk),
                                   "rollout.score_micro_batch=" + std::to_string(score_rows)}),
                            4);
  };
  // The phase's device bytes without the rollout exchange.
  auto bytes = [](const MemoryPlan& p, int rank, Role role, const std::string& name) {
    for (const auto& ph : role_plan(p, rank, role).phases) {
      if (ph.name != name) continue;
      std::uint64_t n = 0;
      for (const auto& t : ph.terms)
        if (t.where == Where::device && t.name != "rollout exchange") n += t.bytes;
      return n;
    }
    throw std::runtime_error("no phase " + name);
  };
  const MemoryPlan whole = plan(16, 0, 0), chunked = plan(16, 4, 0), four = plan(4, 0, 0);
  const MemoryPlan scored = plan(16, 4, 8), eight = plan(2, 0, 0);
  EXPECT_LT(bytes(chunked, 0, Role::actor, "generate"), bytes(whole, 0, Role::actor, "generate"));
  EXPECT_EQ(bytes(chunked, 0, Role::actor, "generate"), bytes(four, 0, Role::actor, "generate"));
  for (auto [rank, role] : {std::pair{0, Role::actor}, {1, Role::critic}, {2, Role::reference}, {3, Role::reward}}) {
    EXPECT_LT(bytes(chunked, rank, role, "score"), bytes(whole, rank, role, "score")) << role_name(role);
    EXPECT_EQ(bytes(chunked, rank, role, "score"), bytes(four, rank, role, "score")) << role_name(role);
    EXPECT_LT(bytes(scored, rank, role, "score"), bytes(chunked, rank, role, "score")) << role_name(role);
    EXPECT_EQ(bytes(scored, rank, role, "score"), bytes(eight, rank, role, "score")) << role_name(role);
  }
}

// A packed pass is planned as its tokens' worth of full-width rows: rollout.score_tokens of two
// rows' tokens as score_micro_batch = 2, train.micro_batch_tokens of three as micro_batch = 3
// without training graphs, and a budget below one row as one row (a longer sequence runs alone).
TEST(MemoryPlan, PackedPassesCountTheirTokens) {
  const std::string sizes = "hidden = 64\nlayers = 4\nheads = 4\nvocab = 5000\n";
  const int T = 32 + 96;
  auto plan = [&](std::vector<std::string> keys) {
    keys.insert(keys.end(), {"rollout.max_prompt_tokens=32", "rollout.max_new_tokens=96", "rollout.batch=16"});
    return make_memory_plan(
        parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n", "", sizes), keys), 4);
  };
  auto same = [](const MemoryPlan& a, const MemoryPlan& b) {
    for (int rank = 0; rank < 4; ++rank)
      for (size_t i = 0; i < a.ranks[rank].roles.size(); ++i)
        for (size_t k = 0; k < a.ranks[rank].roles[i].phases.size(); ++k)
          if (a.ranks[rank].roles[i].phases[k].device_bytes() != b.ranks[rank].roles[i].phases[k].device_bytes())
            return false;
    return true;
  };
  EXPECT_TRUE(same(plan({"rollout.score_tokens=" + std::to_string(2 * T)}), plan({"rollout.score_micro_batch=2"})));
  EXPECT_TRUE(same(plan({"rollout.score_tokens=10"}), plan({"rollout.score_micro_batch=1"})));
  EXPECT_FALSE(same(plan({"rollout.score_tokens=" + std::to_string(2 * T)}), plan({"rollout.score_micro_batch=3"})));
  // Packed micro-batches run without the training graphs (their shapes vary): compared with
  // rows that do not use them either.
  const std::string no_graphs = "train.cuda_graphs=false";
  EXPECT_TRUE(same(plan({"train.micro_batch_tokens=" + std::to_string(3 * T)}), plan({"train.micro_batch=3", no_graphs})));
  EXPECT_FALSE(same(plan({"train.micro_batch_tokens=" + std::to_string(3 * T)}), plan({"train.micro_batch=2", no_graphs})));
}

// Paged decoding (rollout.decode_rows) plans its pool for the KV cache: decode_rows rows of whole
// sequences by default, about what a chunk of that many rows holds (a block's rounding more);
// a smaller kv_cache_tokens less. Only the generate phase moves.
TEST(MemoryPlan, PagedDecodingPlansItsPool) {
  const std::string sizes = "hidden = 64\nlayers = 4\nheads = 4\nvocab = 5000\n";
  auto plan = [&](std::vector<std::string> keys) {
    keys.insert(keys.end(), {"rollout.max_prompt_tokens=32", "rollout.max_new_tokens=96", "rollout.batch=16"});
    return make_memory_plan(parse(deck_text("llama", "actor = 1\n", "", sizes), keys), 1);
  };
  auto kv = [](const MemoryPlan& p) {
    for (const auto& ph : role_plan(p, 0, Role::actor).phases)
      if (ph.name == "generate")
        for (const auto& t : ph.terms)
          if (t.name == "kv cache") return static_cast<double>(t.bytes);
    throw std::runtime_error("no kv cache term");
  };
  const MemoryPlan whole = plan({}), chunk = plan({"rollout.micro_batch=4"}), rows = plan({"rollout.decode_rows=4"});
  const MemoryPlan small = plan({"rollout.decode_rows=16", "rollout.kv_cache_tokens=1024"});
  EXPECT_GE(kv(rows), kv(chunk));
  EXPECT_LT(kv(rows), 1.1 * kv(chunk));
  EXPECT_LT(kv(small), kv(whole) / 1.9);
  const RolePlan &a = role_plan(whole, 0, Role::actor), &b = role_plan(rows, 0, Role::actor);
  for (size_t i = 0; i < a.phases.size(); ++i) {
    if (a.phases[i].name != "generate") {
      EXPECT_EQ(a.phases[i].device_bytes(), b.phases[i].device_bytes()) << a.phases[i].name;
    }
  }
}

// rollout.reuse_prompt_cache: the actor's old log-probs run in the generate phase beside the
// kept cache, over the answers; that phase grows by the answers' logits and activations where
// they are larger than the prompt pass's, and nothing else moves.
TEST(MemoryPlan, ReusingThePromptCacheCountsTheAnswersPassInGenerate) {
  const std::string sizes = "hidden = 64\nlayers = 4\nheads = 4\nvocab = 5000\n";
  auto plan = [&](bool reuse) {
    return make_memory_plan(parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n", "", sizes),
                                  {"rollout.max_prompt_tokens=32", "rollout.max_new_tokens=96",
                                   std::string("rollout.reuse_prompt_cache=") + (reuse ? "true" : "false")}),
                            4);
  };
  const MemoryPlan off = plan(false), on = plan(true);
  const RolePlan &a = role_plan(off, 0, Role::actor), &b = role_plan(on, 0, Role::actor);
  ASSERT_EQ(a.phases.size(), b.phases.size());
  for (size_t i = 0; i < a.phases.size(); ++i) {
    if (a.phases[i].name == "generate")
      EXPECT_GT(b.phases[i].device_bytes(), a.phases[i].device_bytes());
    else
      EXPECT_EQ(b.phases[i].device_bytes(), a.phases[i].device_bytes()) << a.phases[i].name;
  }
  for (Role role : {Role::critic, Role::reference, Role::reward}) {
    const int rank = role == Role::critic ? 1 : role == Role::reference ? 2 : 3;
    EXPECT_EQ(role_plan(on, rank, role).peak, role_plan(off, rank, role).peak) << role_name(role);
  }
}

// reshard_after_forward = false keeps every block gathered through a training step: the train
// phase's gathered term grows from two blocks to all of them, nothing else moves; and a plan
// that no longer fits says to set it back to true.
TEST(MemoryPlan, KeepingBlocksGatheredAddsThemToTraining) {
  const std::string sizes = "hidden = 128\nlayers = 6\nheads = 4\nvocab = 1000\n";
  const Config c = parse(deck_text("llama", "actor = 2\n", "", sizes));
  MemoryPlan resharded = make_memory_plan(c, 2);
  MemoryPlan kept = make_memory_plan(parse(deck_text("llama", "actor = 2\n", "", sizes),
                                           {"model.actor.reshard_after_forward=false"}),
                                     2);
  const auto& units = resharded.unit_params[static_cast<int>(Role::actor)];
  const int64_t block = round_up(units.at(1), 16 * 2), L = static_cast<int64_t>(units.size()) - 1;
  ASSERT_EQ(L, 6);
  const RolePlan& a = role_plan(resharded, 0, Role::actor);
  const RolePlan& k = role_plan(kept, 0, Role::actor);
  ASSERT_EQ(a.phases.size(), k.phases.size());
  for (size_t i = 0; i < a.phases.size(); ++i) {
    const int64_t grown = static_cast<int64_t>(k.phases[i].device_bytes()) - static_cast<int64_t>(a.phases[i].device_bytes());
    if (a.phases[i].name == "train" && a.phases[i].active == Role::actor)
      EXPECT_EQ(grown, (L - 2) * block * 4) << "float32 blocks 3..6 kept as well as the two in flight";
    else
      EXPECT_EQ(grown, 0) << a.phases[i].name;
  }
  // A device on which only the resharded plan fits (usable memory is linear in device_memory):
  // the error names the key that fixes it.
  const std::string text = deck_text("llama", "actor = 2\n", "", sizes);
  auto usable_at = [&](double bytes) {
    return static_cast<double>(
        make_memory_plan(parse(text, {"dist.device_memory=" + std::to_string(static_cast<long long>(bytes))}), 2).usable);
  };
  const double u1 = usable_at(40e9), u2 = usable_at(80e9), slope = (u2 - u1) / 40e9, offset = u2 - slope * 80e9;
  const double target = (static_cast<double>(a.peak) + static_cast<double>(k.peak)) / 2;
  const std::vector<std::string> tight = {"model.actor.reshard_after_forward=false",
                                          "dist.device_memory=" + std::to_string(static_cast<long long>((target - offset) / slope))};
  MemoryPlan over = make_memory_plan(parse(text, tight), 2);
  ASSERT_FALSE(over.fits()) << format_plan(over);
  const std::string e = error_of([&] { check_plan(over); });
  EXPECT_NE(e.find("--set model.actor.reshard_after_forward=true"), std::string::npos) << e;
}

TEST(MemoryPlan, ColocatedHoldsEveryRoleAndParksTheIdle) {
  MemoryPlan co = make_memory_plan(
      parse(deck_text("llama", "mode = colocated\npark = always\n"), {"model.critic.dtype=bfloat16"}), 4);
  EXPECT_TRUE(co.park_idle);
  MemoryPlan dis = make_memory_plan(parse(deck_text("llama", "actor = 1\ncritic = 1\nreference = 1\nreward = 1\n"),
                                          {"model.critic.dtype=bfloat16"}),
                                    4);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(co.ranks[static_cast<size_t>(rank)].roles.size(), 4u);
    EXPECT_EQ(dis.ranks[static_cast<size_t>(rank)].roles.size(), 1u);
    for (const auto& r : co.ranks[static_cast<size_t>(rank)].roles) EXPECT_EQ(r.group_size, 4);
  }
  // In the actor's generate phase the critic's parameter and gradient shards are parked on the
  // host, its master weights and moments stay on the device; the frozen models are parked.
  const RolePlan& actor = role_plan(co, 0, Role::actor);
  ASSERT_EQ(actor.phases.front().name, "generate");
  std::set<std::string> critic_device, critic_host, frozen_device;
  for (const auto& t : actor.phases.front().terms) {
    if (t.role == Role::critic) (t.where == Where::device ? critic_device : critic_host).insert(t.name);
    if ((t.role == Role::reference || t.role == Role::reward) && t.where == Where::device) frozen_device.insert(t.name);
  }
  EXPECT_EQ(critic_host, (std::set<std::string>{"parameters", "gradients"}));
  EXPECT_EQ(critic_device, (std::set<std::string>{"master", "moments"}));
  EXPECT_TRUE(frozen_device.empty());
  // Every role's phase also counts what the others keep on the device.
  const RolePlan& critic = role_plan(co, 0, Role::critic);
  EXPECT_GT(critic.peak, critic.params + critic.grads + critic.master + critic.moments + actor.master + actor.moments);
}

// placement.park = auto parks only when the plan does not fit otherwise; never keeps every
// model on the device (and then counts it there).
TEST(MemoryPlan, ColocatedParksOnlyWhenItMustByDefault) {
  auto plan_with = [](const std::string& memory) {
    return make_memory_plan(parse(deck_text("llama", "mode = colocated\n"),
                                  {"model.critic.dtype=bfloat16", "dist.device_memory=" + memory}),
                            4);
  };
  MemoryPlan roomy = plan_with("80GiB");
  ASSERT_TRUE(roomy.fits());
  EXPECT_FALSE(roomy.park_idle);
  for (const auto& t : role_plan(roomy, 0, Role::actor).phases.front().terms)
    EXPECT_EQ(t.where == Where::host, false) << t.name << " of " << role_name(t.role) << " is on the host";
  // Just above what the parked plan needs, below the unparked one: auto parks.
  MemoryPlan always = make_memory_plan(
      parse(deck_text("llama", "mode = colocated\npark = always\n"), {"model.critic.dtype=bfloat16", "dist.device_memory=80GiB"}), 4);
  std::uint64_t parked_peak = 0, resident_peak = 0;
  for (const auto& rp : always.ranks) parked_peak = std::max(parked_peak, rp.peak);
  for (const auto& rp : roomy.ranks) resident_peak = std::max(resident_peak, rp.peak);
  ASSERT_LT(parked_peak, resident_peak);
  // usable = a * memory - c: solve for the memory whose usable part lies midway.
  MemoryPlan half = plan_with("40GiB");
  const double a = (static_cast<double>(roomy.usable) - static_cast<double>(half.usable)) /
                   (static_cast<double>(roomy.device_memory) - static_cast<double>(half.device_memory));
  const double c = a * static_cast<double>(roomy.device_memory) - static_cast<double>(roomy.usable);
  const double target = (static_cast<double>(parked_peak) + static_cast<double>(resident_peak)) / 2;
  const auto between = static_cast<std::uint64_t>((target + c) / a);
  MemoryPlan tight = plan_with(std::to_string(between));
  EXPECT_TRUE(tight.park_idle) << "parked peak " << parked_peak << ", resident " << resident_peak;
  EXPECT_TRUE(tight.fits());
}

TEST(MemoryPlan, ADeckThatFitsPasses) {
  MemoryPlan p = make_memory_plan(parse(deck_text("llama", "actor = 2\ncritic = 1\nreward = 1\n")), 4);
  EXPECT_TRUE(p.fits());
  EXPECT_NO_THROW(check_plan(p));
  EXPECT_EQ(plan_problems(p), "");
  EXPECT_NE(format_plan(p).find("fits"), std::string::npos);
}

namespace {

// The --set arguments of one suggestion line: "--set a=1 --set b=2 (...)".
std::vector<std::string> sets_of(const std::string& line) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = line.find("--set ", at)) != std::string::npos) {
    at += 6;
    size_t end = line.find(' ', at);
    out.push_back(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
  }
  return out;
}

// The plan's suggestion lines (each "    --set ..." or "    --ranks ..."), those naming `key` where given.
std::vector<std::string> suggestion_lines(const std::string& error, const std::string& key = "") {
  std::vector<std::string> out;
  std::istringstream lines(error);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("    --", 0) == 0 && line.find(key) != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace

TEST(MemoryPlan, ADeckThatCannotFitNamesKnobsThatDo) {
  // A 1B-parameter-class llama trained in float32 on one rank of a 12 GiB device: parameters,
  // gradients and moments alone take 16 bytes a parameter.
  const std::string sizes = "hidden = 2048\nlayers = 16\nheads = 16\nvocab = 32000\n";
  const std::string text = "[placement]\nactor = 1\nreference = 1\n[dist]\ndevice_memory = 12GiB\n"
                           "[model.actor]\npath = random:llama\n" + sizes +
                           "[rollout]\nbatch = 4\nmax_prompt_tokens = 128\nmax_new_tokens = 64\n";
  MemoryPlan p = make_memory_plan(parse(text), 2);
  ASSERT_FALSE(p.fits()) << format_plan(p);
  const RolePlan& a = role_plan(p, 0, Role::actor);
  EXPECT_GT(a.params + a.grads + a.moments, p.usable);  // the premise: persistent state alone overflows
  const std::string e = error_of([&] { check_plan(p); });
  EXPECT_NE(e.find("the actor on rank 0 does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("usable of 12.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("largest terms: moments"), std::string::npos) << e;
  // Every knob suggested must really make it fit; offloading the optimizer is one of them.
  EXPECT_NE(e.find("model.actor.offload_optimizer=true"), std::string::npos) << e;
  int suggestions = 0;
  for (const std::string& line : suggestion_lines(e)) {
    auto sets = sets_of(line);
    int world = 2;
    if (line.find("--set placement.actor=") != std::string::npos)
      for (const auto& s : sets)
        if (s.rfind("placement.actor=", 0) == 0) world = std::stoi(s.substr(16)) + 1;
    MemoryPlan q = make_memory_plan(parse(text, sets), world);
    EXPECT_TRUE(q.fits()) << line << "\n" << format_plan(q);
    ++suggestions;
  }
  EXPECT_GE(suggestions, 1) << e;
}

// With packed micro-batches (train.micro_batch_tokens) the training knob is the token budget,
// not train.micro_batch (which then changes nothing): a budget too large to fit gets a halved
// one that is checked to fit.
TEST(MemoryPlan, PackedTrainingIsAdvisedASmallerTokenBudget) {
  const std::string text = "[placement]\nactor = 1\n[dist]\ndevice_memory = 6GiB\n"
                           "[model.actor]\npath = random:llama\nhidden = 256\nlayers = 4\nheads = 4\nvocab = 32000\n"
                           "[rollout]\nbatch = 4\nmax_prompt_tokens = 128\nmax_new_tokens = 64\n"
                           "[train]\nmicro_batch_tokens = 400000\ncuda_graphs = false\n";
  MemoryPlan p = make_memory_plan(parse(text), 1);
  ASSERT_FALSE(p.fits()) << format_plan(p);
  const std::string e = error_of([&] { check_plan(p); });
  EXPECT_NE(e.find("--set train.micro_batch_tokens="), std::string::npos) << e;
  EXPECT_EQ(e.find("--set train.micro_batch="), std::string::npos) << e;
  for (const std::string& line : suggestion_lines(e, "train.micro_batch_tokens="))
    EXPECT_TRUE(make_memory_plan(parse(text, sets_of(line)), 1).fits()) << line;
}

// Paged decoding whose pool does not fit: the advice names a halved rollout.kv_cache_tokens
// (not below one whole sequence) and fewer rollout.decode_rows, each checked to fit.
TEST(MemoryPlan, PagedDecodingIsAdvisedASmallerPool) {
  const std::string text = "[placement]\nactor = 1\n[dist]\ndevice_memory = 6GiB\n"
                           "[model.actor]\npath = random:llama\nhidden = 256\nlayers = 8\nheads = 4\nvocab = 32000\n"
                           "[rollout]\nbatch = 512\nmax_prompt_tokens = 64\nmax_new_tokens = 1984\n"
                           "decode_rows = 512\nscore_micro_batch = 1\n[train]\nmicro_batch = 1\ncuda_graphs = false\n";
  MemoryPlan p = make_memory_plan(parse(text), 1);
  ASSERT_FALSE(p.fits()) << format_plan(p);
  const std::string e = error_of([&] { check_plan(p); });
  EXPECT_NE(e.find("--set rollout.kv_cache_tokens="), std::string::npos) << e;
  EXPECT_NE(e.find("--set rollout.decode_rows="), std::string::npos) << e;
  for (const std::string& line : suggestion_lines(e)) {
    const size_t at = line.find("rollout.kv_cache_tokens=");
    if (at != std::string::npos) {
      EXPECT_GE(std::stoi(line.substr(at + 24)), 64 + 1984) << line;
    }
    EXPECT_TRUE(make_memory_plan(parse(text, sets_of(line)), 1).fits()) << line;
  }
}

TEST(MemoryPlan, NothingFitsSaysSo) {
  // 600 MiB of device memory leaves almost nothing after the CUDA context.
  const std::string text = "[placement]\nactor = 1\n[dist]\ndevice_memory = 600MiB\n"
                           "[model.actor]\npath = random:gpt2\nhidden = 1024\nlayers = 4\nheads = 8\nvocab = 50000\n";
  const std::string e = error_of([&] { check_plan(make_memory_plan(parse(text), 1)); });
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing tried fits"), std::string::npos) << e;
}

TEST(MemoryPlan, ColocatedKnobsCanAskForMoreRanks) {
  const std::string sizes = "hidden = 1024\nlayers = 8\nheads = 8\nvocab = 32000\n";
  const std::string text = "[placement]\nmode = colocated\nreward = 0\n[dist]\ndevice_memory = 3GiB\n"
                           "[model.actor]\npath = random:llama\n" + sizes + "[model.critic]\npath = random:llama\n" + sizes;
  MemoryPlan p = make_memory_plan(parse(text), 1);
  ASSERT_FALSE(p.fits());
  const std::string e = plan_problems(p);
  const size_t at = e.find("    --ranks ");  // a suggestion on its own: more ranks alone
  ASSERT_NE(at, std::string::npos) << e;
  const int n = std::stoi(e.substr(at + 12));
  EXPECT_GT(n, 1);
  EXPECT_TRUE(make_memory_plan(parse(text), n).fits()) << format_plan(make_memory_plan(parse(text), n));
  EXPECT_FALSE(make_memory_plan(parse(text), n - 1).fits());
}

TEST(MemoryPlan, FoundingDeckIsGptJ6B) {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  const std::string dir = src;
  Config c = load_config(Deck::from_file(dir + "/inputs/founding.deck", {}, deck_schema()));
  MemoryPlan p = make_memory_plan(c, 8);
  // GPT-J-6B in Hugging Face's layout: wte and lm_head (with bias) V h each, per block one
  // LayerNorm 2h, q/k/v/out 4h^2 without bias, fc_in h f + f, fc_out f h + h; ln_f 2h.
  const int64_t V = 50400, h = 4096, f = 16384, L = 28;
  const int64_t gptj6b = 2 * V * h + V + L * (2 * h + 4 * h * h + 2 * h * f + f + h) + 2 * h;
  EXPECT_EQ(gptj6b, 6050882784);  // 6.05B
  EXPECT_EQ(role_plan(p, 0, Role::actor).parameters, gptj6b);
  EXPECT_EQ(role_plan(p, 6, Role::reference).parameters, gptj6b);
  // The critic: no LM head, a [1, h] score with bias; the reward: a [1, h] score without.
  EXPECT_EQ(role_plan(p, 4, Role::critic).parameters, gptj6b - V * h - V + h + 1);
  EXPECT_EQ(role_plan(p, 7, Role::reward).parameters, gptj6b - V * h - V + h);
  // The deck's random:gptj sizes are those of inputs/models/gpt-j-6b/config.json.
  const std::string json = dir + "/inputs/models/gpt-j-6b/config.json";
  const ModelConfig real = ModelConfig::from_json_file(json);
  for (Role r : {Role::actor, Role::critic, Role::reward})
    EXPECT_EQ(p.unit_params[static_cast<int>(r)], unit_parameter_counts(real, head_of(r))) << role_name(r);
  // Eight A100-40GB: the trained models do not fit as they are.
  EXPECT_FALSE(p.fits());
}

TEST(MemoryPlan, TrainGraphsKeepTheTrainWorkingSetThroughEveryPhase) {
  const std::string sizes = "hidden = 128\nlayers = 4\nheads = 4\nvocab = 1000\n";
  // Each trained model alone on its rank: graphed on a GPU (device_memory names one).
  const std::string text = deck_text("llama", "actor = 1\ncritic = 1\n", "[train]\nmicro_batch = 8\n", sizes);
  MemoryPlan on = make_memory_plan(parse(text), 2);
  MemoryPlan off = make_memory_plan(parse(text, {"train.cuda_graphs=false"}), 2);
  ASSERT_TRUE(on.on_gpu);
  auto graph_bytes = [](const PhasePlan& ph) {
    std::uint64_t n = 0;
    for (const auto& t : ph.terms)
      if (t.name == "train graph") n += t.bytes;
    return n;
  };
  for (Role role : {Role::actor, Role::critic}) {
    const RolePlan& a = role_plan(on, role == Role::actor ? 0 : 1, role);
    const RolePlan& b = role_plan(off, role == Role::actor ? 0 : 1, role);
    // The graph's pool is the train phase's working set.
    std::uint64_t working = 0;
    for (const auto& ph : a.phases)
      if (ph.name == "train")
        for (const auto& t : ph.terms)
          if (t.name == "gathered parameters" || t.name == "gradient buffers" || t.name == "activations" ||
              t.name == "logits")
            working += t.bytes;
    ASSERT_GT(working, 0u);
    ASSERT_EQ(a.phases.size(), b.phases.size());
    for (size_t i = 0; i < a.phases.size(); ++i) {
      const std::uint64_t expected = a.phases[i].name == "train" ? 0 : working;
      EXPECT_EQ(graph_bytes(a.phases[i]), expected) << role_name(role) << " " << a.phases[i].name;
      EXPECT_EQ(a.phases[i].device_bytes(), b.phases[i].device_bytes() + expected) << a.phases[i].name;
      EXPECT_EQ(graph_bytes(b.phases[i]), 0u);
    }
  }
  // The table names the graphs, which have no column of their own.
  EXPECT_NE(format_plan(on).find("train graph: the actor's"), std::string::npos) << format_plan(on);
  EXPECT_NE(format_plan(on).find("train graph: the critic's"), std::string::npos) << format_plan(on);
  EXPECT_EQ(format_plan(off).find("train graph"), std::string::npos) << format_plan(off);
  // Several micro-batches a step are graphed too (one pool, the same working set); the CPU
  // has no graphs.
  MemoryPlan micro = make_memory_plan(parse(text, {"train.micro_batch=4"}), 2);
  EXPECT_GT(graph_bytes(role_plan(micro, 0, Role::actor).phases.front()), 0u);
  MemoryPlan cpu = make_memory_plan(parse(text, {"dist.device=cpu"}), 2);
  for (const auto& rank : cpu.ranks)
    for (const auto& r : rank.roles)
      for (const auto& ph : r.phases) EXPECT_EQ(graph_bytes(ph), 0u) << "on the CPU";
  // A device on which only the ungraphed plan fits: the error names the key.
  auto usable_at = [&](double bytes) {
    return static_cast<double>(
        make_memory_plan(parse(text, {"dist.device_memory=" + std::to_string(static_cast<long long>(bytes))}), 2).usable);
  };
  const double u1 = usable_at(40e9), u2 = usable_at(80e9), slope = (u2 - u1) / 40e9, offset = u2 - slope * 80e9;
  const RolePlan& a_on = role_plan(on, 0, Role::actor);
  const RolePlan& a_off = role_plan(off, 0, Role::actor);
  ASSERT_GT(a_on.peak, a_off.peak);
  const double target = (static_cast<double>(a_on.peak) + static_cast<double>(a_off.peak)) / 2;
  MemoryPlan over = make_memory_plan(
      parse(text, {"dist.device_memory=" + std::to_string(static_cast<long long>((target - offset) / slope))}), 2);
  ASSERT_FALSE(over.fits()) << format_plan(over);
  const std::string e = error_of([&] { check_plan(over); });
  EXPECT_NE(e.find("--set train.cuda_graphs=false"), std::string::npos) << e;
}

}  // namespace test_memory_plan
