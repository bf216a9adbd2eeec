// Transformer internals on small random models of every family (no Hugging Face files needed):
// KV-cache decoding against full forward passes, left padding against unpadded runs, grouped-
// query attention against the equivalent multi-head model, checkpointed against plain
// gradients, heads, hf_state names, save/load round trips, generation, and config refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ftw.h>
#include <sys/stat.h>
#include <cstdlib>
#include <fstream>
#include <set>
#include <torch/types.h>

#include "quartet/core/check.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/rotary.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/transformer.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_transformer_internals {

namespace {

// POSIX, not std::filesystem: libtorch.so exports its own std::filesystem free functions, and
// its remove_all crashes when bound in place of libstdc++'s.
void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}
std::string temp_dir(const std::string& name) {
  const char* t = std::getenv("TMPDIR");
  return std::string(t && *t ? t : "/tmp") + "/quartet_ti_" + std::to_string(getpid()) + "_" + name;
}

using quartet::test::error_of;

::testing::AssertionResult has_error(const char*, const char*, const std::string& got,
                                     const std::string& want) {
  if (got.find(want) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected an error containing\n  " << want << "\ngot\n  " << got;
}
#define EXPECT_ERROR_HAS(call, expected) \
  EXPECT_PRED_FORMAT2(has_error, error_of([&] { call; }), std::string(expected))

struct Case {
  const char* name;
  ModelConfig config;
};

ModelConfig base(const char* type) {
  ModelConfig c;
  c.model_type = type;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.max_positions = 64;
  c.norm_eps = 1e-5;
  c.pad_token_id = 0;
  c.initializer_range = 0.2;  // large enough that attention patterns are far from uniform
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  {
    auto c = base("llama");
    c.num_kv_heads = 2;
    c.intermediate_size = 48;
    c.activation = "silu";
    out.push_back({"llama_gqa", c});
  }
  {
    auto c = base("qwen2");
    c.num_kv_heads = 1;
    c.intermediate_size = 48;
    c.attention_bias = true;
    c.tie_word_embeddings = true;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_positions = 16;
    out.push_back({"qwen2_tied_llama3", c});
  }
  {
    auto c = base("llama");
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = 2;
    c.intermediate_size = 40;
    c.attention_bias = true;
    c.mlp_bias = true;
    out.push_back({"llama_bias_linear", c});
  }
  {
    auto c = base("gpt2");
    c.activation = "gelu_new";
    c.tie_word_embeddings = true;
    out.push_back({"gpt2", c});
  }
  {
    auto c = base("gptj");
    c.rotary_dim = 4;
    c.activation = "gelu_new";
    out.push_back({"gptj", c});
  }
  {
    auto c = base("gpt_neox");
    c.rotary_dim = 3;  // odd, as int(head_dim * rotary_pct) can be: 4 dims rotate, as in HF
    c.intermediate_size = 64;
    c.activation = "gelu";
    c.parallel_residual = true;
    c.attention_bias = true;
    out.push_back({"neox_parallel", c});
  }
  {
    auto c = base("gpt_neox");
    c.rotary_dim = 8;
    c.intermediate_size = 64;
    c.activation = "gelu";
    c.parallel_residual = false;
    c.attention_bias = true;
    c.rope_scaling.type = "dynamic";
    c.rope_scaling.factor = 2;
    // Within max_positions dynamic NTK is the plain rotary (as in transformers); its growth is
    // checked in RotaryDynamic, since it makes cached and full passes differ by design.
    out.push_back({"neox_sequential_dynamic", c});
  }
  {
    // Qwen3: q/k norms, a head_dim that is not hidden / heads, q/k/v/o biases, a window of 3 on
    // layer 0 (shorter than the test sequences).
    auto c = base("qwen3");
    c.num_kv_heads = 2;
    c.head_dim = 12;
    c.intermediate_size = 40;
    c.attention_bias = true;
    c.sliding_window = 3;
    c.sliding_layers = {true, false};
    out.push_back({"qwen3_sliding", c});
  }
  {
    auto c = base("mistral");
    c.num_kv_heads = 2;
    c.intermediate_size = 40;
    c.sliding_window = 3;
    out.push_back({"mistral_sliding", c});
  }
  return out;
}

Transformer make(const ModelConfig& c, Head head, uint64_t seed = 7) {
  torch::manual_seed(seed);
  return Transformer(c, head, torch::TensorOptions().dtype(torch::kFloat64), true);
}

torch::Tensor random_ids(int64_t B, int64_t T, int64_t vocab) {
  return torch::randint(1, vocab, {B, T}, torch::kLong);
}

// Left padding of `pad[b]` tokens per row.
torch::Tensor left_mask(int64_t B, int64_t T, const std::vector<int64_t>& pad) {
  auto m = torch::ones({B, T}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) m[b].narrow(0, 0, pad[static_cast<size_t>(b)]).zero_();
  return m;
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_TRUE(torch::isfinite(a).all().item<bool>()) << what << ": not finite";
  const double diff = (a - b).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what << ": max |diff| = " << diff;
}

class Families : public ::testing::TestWithParam<Case> {};

// Padded rows of a left-padded batch give the same logits as each sequence alone.
TEST_P(Families, LeftPaddingMatchesUnpadded) {
  const auto& c = GetParam().config;
  auto model = make(c, Head::causal_lm);
  torch::NoGradGuard ng;
  const int64_t B = 3, T = 9;
  std::vector<int64_t> pad{0, 3, 8};
  auto ids = random_ids(B, T, c.vocab_size);
  auto mask = left_mask(B, T, pad);
  ids.masked_fill_(mask == 0, 0);
  auto logits = model->forward(ids, mask);
  ASSERT_TRUE(torch::isfinite(logits).all().item<bool>());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = T - pad[static_cast<size_t>(b)];
    auto one = ids[b].narrow(0, pad[static_cast<size_t>(b)], n).unsqueeze(0);
    auto alone = model->forward(one, torch::ones({1, n}, torch::kLong));
    expect_close(logits[b].narrow(0, pad[static_cast<size_t>(b)], n), alone[0], 1e-10,
                 std::string(GetParam().name) + " row " + std::to_string(b));
  }
}

// Prompt through the cache, then one token at a time, equals one full forward pass.
TEST_P(Families, KvCacheMatchesFullForward) {
  const auto& c = GetParam().config;
  auto model = make(c, Head::causal_lm);
  torch::NoGradGuard ng;
  const int64_t B = 2, P = 5, N = 6;
  auto ids = random_ids(B, P + N, c.vocab_size);
  auto mask = torch::ones({B, P + N}, torch::kLong);
  mask[1].narrow(0, 0, 2).zero_();  // row 1 left-padded by 2
  mask[0][P + 2] = 0;               // row 0: a finished-sequence slot in the middle of decoding
  auto full = model->forward(ids, mask);

  KVCache cache = model->make_cache(B, P + N);
  auto first = model->forward(ids.narrow(1, 0, P), mask.narrow(1, 0, P), &cache);
  EXPECT_EQ(cache.length, P);
  expect_close(first, full.narrow(1, 0, P), 1e-10, std::string(GetParam().name) + " prompt");
  for (int64_t t = P; t < P + N; ++t) {
    auto step = model->forward(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), &cache);
    // The masked slot's own output is garbage by design; the others must agree.
    for (int64_t b = 0; b < B; ++b) {
      if (mask[b][t].item<int64_t>() == 0) continue;
      expect_close(step[b][0], full[b][t], 1e-10,
                   std::string(GetParam().name) + " step " + std::to_string(t) + " row " + std::to_string(b));
    }
  }
  EXPECT_EQ(cache.length, P + N);
  // next_token_logits is the last position of the same computation.
  KVCache c2 = model->make_cache(B, P);
  expect_close(model->next_token_logits(ids.narrow(1, 0, P), mask.narrow(1, 0, P), &c2),
               full.select(1, P - 1), 1e-10, "next_token_logits");
}

// Recomputing blocks in backward gives the gradients of the plain graph.
TEST_P(Families, CheckpointedGradientsEqualPlain) {
  const auto& c = GetParam().config;
  auto ids = random_ids(2, 7, c.vocab_size);
  auto mask = left_mask(2, 7, {0, 2});
  auto grads = [&](bool ckpt) {
    auto model = make(c, Head::token_value, 11);
    model->set_activation_checkpointing(ckpt);
    auto v = model->forward(ids, mask);
    (v * mask.to(v.dtype())).pow(2).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto plain = grads(false), ckpt = grads(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].defined());
    expect_close(ckpt[i], plain[i], 1e-12, std::string(GetParam().name) + " grad " + std::to_string(i));
  }
  EXPECT_GT(plain[0].abs().sum().item<double>(), 0.0);
}

// The three heads: shapes, and the reward at the last real token of each row.
TEST_P(Families, Heads) {
  const auto& c = GetParam().config;
  torch::NoGradGuard ng;
  auto ids = random_ids(2, 6, c.vocab_size);
  auto mask = left_mask(2, 6, {0, 3});
  auto lm = make(c, Head::causal_lm);
  EXPECT_EQ(lm->forward(ids, mask).sizes(), (std::vector<int64_t>{2, 6, c.vocab_size}));
  auto value = make(c, Head::token_value);
  EXPECT_EQ(value->forward(ids, mask).sizes(), (std::vector<int64_t>{2, 6}));
  auto reward = make(c, Head::sequence_reward);
  auto r = reward->forward(ids, mask);
  ASSERT_EQ(r.sizes(), (std::vector<int64_t>{2}));
  // Right padding too: the score is read at the rightmost real token.
  auto rmask = torch::ones({2, 6}, torch::kLong);
  rmask[1].narrow(0, 4, 2).zero_();
  auto hidden = reward->hidden_states(ids, rmask);
  auto rr = reward->forward(ids, rmask);
  auto named = reward->named_parameters();
  auto w = named["score.weight"];
  expect_close(rr[1], (hidden[1][3] * w[0]).sum(), 1e-12, "reward at last real token");
  expect_close(rr[0], (hidden[0][5] * w[0]).sum(), 1e-12, "reward at T-1");
}

// Weights survive save_model/load_model (config.json + safetensors) bit for bit.
TEST_P(Families, SaveLoadRoundTrip) {
  const auto& c = GetParam().config;
  const std::string dir = temp_dir(GetParam().name);
  for (Head head : {Head::causal_lm, Head::token_value, Head::sequence_reward}) {
    auto model = make(c, head);
    save_model(model, dir);
    auto cfg = ModelConfig::from_json_file(dir + "/config.json");
    EXPECT_EQ(cfg.architecture, architecture_name(c, head));
    auto back = load_model(dir, head, torch::kFloat64, torch::kCPU);
    auto a = model->hf_state(), b = back->hf_state();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
    }
    torch::NoGradGuard ng;
    auto ids = random_ids(2, 5, c.vocab_size);
    auto mask = left_mask(2, 5, {1, 0});
    EXPECT_TRUE(torch::equal(model->forward(ids, mask), back->forward(ids, mask))) << head_name(head);
    // A float32 load converts.
    auto f32 = load_model(dir, head, torch::kFloat32, torch::kCPU);
    EXPECT_EQ(f32->hf_state().front().second.scalar_type(), torch::kFloat32);
  }
  // A critic started from the causal LM: base weights loaded, head fresh.
  {
    auto lm = make(c, Head::causal_lm);
    save_model(lm, dir);
    EXPECT_ERROR_HAS(load_model(dir, Head::token_value, torch::kFloat64, torch::kCPU), "missing (");
    auto critic = load_model(dir, Head::token_value, torch::kFloat64, torch::kCPU, false);
    auto s = critic->named_parameters();
    auto l = lm->named_parameters();
    for (const auto& item : s) {
      if (l.contains(item.key())) {
        EXPECT_TRUE(torch::equal(item.value(), l[item.key()])) << item.key();
      }
    }
  }
  remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(All, Families, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(TransformerInternals, RotaryDynamic) {
  auto c = base("llama");
  c.complete();
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2;
  auto plain = c;
  plain.rope_scaling.type = "none";
  EXPECT_TRUE(torch::equal(rotary_inv_freq(c, 10), rotary_inv_freq(plain, 10)));
  // base * (factor * len / max - (factor - 1)) ^ (dim / (dim - 2)), here dim = 8, len = 128.
  auto grown = plain;
  grown.rope_theta = 10000.0 * std::pow(2.0 * 128 / 64 - 1.0, 8.0 / 6.0);
  EXPECT_TRUE(torch::equal(rotary_inv_freq(c, 128), rotary_inv_freq(grown, 128)));
}

// Grouped-query attention equals multi-head attention whose k/v heads are the GQA heads repeated.
TEST(TransformerInternals, GqaEqualsRepeatedHeads) {
  auto c = base("llama");
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.intermediate_size = 40;
  auto gqa = make(c, Head::causal_lm);
  auto m = c;
  m.num_kv_heads = 8;
  auto mha = make(m, Head::causal_lm);
  {
    torch::NoGradGuard ng;
    auto src = gqa->named_parameters();
    const int64_t hd = c.hidden_size / c.num_heads, g = c.num_heads / c.num_kv_heads;
    for (auto& item : mha->named_parameters()) {
      auto s = src[item.key()];
      if (item.key().find("k_proj") != std::string::npos || item.key().find("v_proj") != std::string::npos)
        s = s.view({c.num_kv_heads, hd, -1}).repeat_interleave(g, 0).reshape(item.value().sizes());
      item.value().copy_(s);
    }
  }
  torch::NoGradGuard ng;
  auto ids = random_ids(3, 8, c.vocab_size);
  auto mask = left_mask(3, 8, {0, 1, 5});
  expect_close(gqa->forward(ids, mask), mha->forward(ids, mask), 1e-10, "gqa vs mha");
}

// Names and shapes as HF writes them.
TEST(TransformerInternals, HfNames) {
  auto names = [](const ModelConfig& c, Head h) {
    std::map<std::string, std::vector<int64_t>> out;
    for (auto& [n, t] : make(c, h)->hf_state()) out[n] = t.sizes().vec();
    return out;
  };
  auto cs = cases();
  auto llama = names(cs[0].config, Head::causal_lm);
  EXPECT_EQ(llama.at("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_TRUE(llama.count("lm_head.weight"));
  EXPECT_FALSE(llama.count("model.layers.0.self_attn.q_proj.bias"));
  auto qwen = names(cs[1].config, Head::token_value);
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.k_proj.bias"), (std::vector<int64_t>{8}));
  EXPECT_FALSE(qwen.count("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(qwen.count("lm_head.weight"));
  EXPECT_TRUE(qwen.count("score.weight") && qwen.count("score.bias"));
  auto qwen_lm = names(cs[1].config, Head::causal_lm);
  EXPECT_FALSE(qwen_lm.count("lm_head.weight"));  // tied
  auto gpt2 = names(cs[3].config, Head::causal_lm);
  EXPECT_EQ(gpt2.at("transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(gpt2.at("transformer.h.0.mlp.c_proj.weight"), (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(gpt2.at("transformer.wpe.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(gpt2.size(), 2u + 2 * 12 + 2u);
  auto gpt2_tv = names(cs[3].config, Head::token_value);
  EXPECT_TRUE(gpt2_tv.count("classifier.weight") && gpt2_tv.count("classifier.bias"));
  auto gptj = names(cs[4].config, Head::causal_lm);
  EXPECT_TRUE(gptj.count("lm_head.bias") && gptj.count("transformer.h.1.attn.out_proj.weight"));
  EXPECT_FALSE(gptj.count("transformer.h.1.attn.out_proj.bias"));
  EXPECT_TRUE(names(cs[4].config, Head::sequence_reward).count("score.weight"));
  auto neox = names(cs[5].config, Head::causal_lm);
  EXPECT_EQ(neox.at("gpt_neox.layers.0.attention.query_key_value.weight"), (std::vector<int64_t>{96, 32}));
  EXPECT_TRUE(neox.count("embed_out.weight") && neox.count("gpt_neox.final_layer_norm.bias"));
  EXPECT_TRUE(names(cs[5].config, Head::token_value).count("classifier.bias"));
  auto neox_rm = names(cs[5].config, Head::sequence_reward);
  EXPECT_TRUE(neox_rm.count("score.weight") && !neox_rm.count("score.bias"));
}

// load_hf: every refusal names the tensor and the directory; known buffers are ignored.
TEST(TransformerInternals, LoadRefusals) {
  auto c = cases()[3].config;  // gpt2
  auto model = make(c, Head::causal_lm);
  const std::string dir = temp_dir("load");
  auto state = model->hf_state();
  auto write = [&](NamedTensors t) {
    remove_tree(dir);
    ::mkdir(dir.c_str(), 0777);
    save_safetensors_checkpoint(dir, t);
    return SafetensorsCheckpoint(dir);
  };
  {
    auto t = state;
    t.emplace_back("transformer.h.0.attn.bias", torch::ones({1, 1, 64, 64}));
    t.emplace_back("transformer.h.0.attn.masked_bias", torch::ones({}));
    auto other = make(c, Head::causal_lm, 99);
    other->load_hf(write(t));
    EXPECT_TRUE(torch::equal(other->hf_state()[0].second, state[0].second));
  }
  {
    auto t = state;
    t.erase(t.begin() + 3);
    EXPECT_ERROR_HAS(model->load_hf(write(t)), dir + ": tensor '" + state[3].first + "' is missing");
  }
  {
    auto t = state;
    t[2].second = torch::zeros({3});
    EXPECT_ERROR_HAS(model->load_hf(write(t)), dir + ": tensor '" + state[2].first + "' has shape [3]");
  }
  {
    auto t = state;
    t.emplace_back("transformer.h.0.attn.rogue", torch::zeros({2}));
    EXPECT_ERROR_HAS(model->load_hf(write(t)), "does not have: 'transformer.h.0.attn.rogue'");
  }
  {
    // Files saved from the bare GPT2Model carry no "transformer." prefix.
    NamedTensors t;
    for (auto& [n, v] : state) t.emplace_back(n.substr(std::string("transformer.").size()), v);
    auto other = make(c, Head::causal_lm, 99);
    other->load_hf(write(t));
    EXPECT_TRUE(torch::equal(other->hf_state()[5].second, state[5].second));
  }
  remove_tree(dir);
}

// Greedy generation re-derived from full forward passes; stop ids; seeds.
TEST(TransformerInternals, Generation) {
  auto c = cases()[0].config;
  auto model = make(c, Head::causal_lm);
  auto prompt = random_ids(3, 5, c.vocab_size);
  auto pmask = left_mask(3, 5, {0, 2, 4});
  prompt.masked_fill_(pmask == 0, 0);
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = 6;
  auto g = generate(model, prompt, pmask, p);
  ASSERT_EQ(g.tokens.sizes(), (std::vector<int64_t>{3, 11}));
  EXPECT_TRUE(torch::equal(g.tokens.narrow(1, 0, 5), prompt));
  EXPECT_EQ(g.new_lengths.sum().item<int64_t>(), 18);
  {
    torch::NoGradGuard ng;
    auto logits = model->forward(g.tokens, g.attention_mask);
    auto greedy = logits.narrow(1, 4, 6).argmax(-1);
    EXPECT_TRUE(torch::equal(greedy, g.tokens.narrow(1, 5, 6)));
  }
  // Stop at the token row 0 emits first: row 0 ends there, pads and masks afterwards.
  const int64_t stop = g.tokens[0][5].item<int64_t>();
  p.stop_ids = {stop};
  p.pad_id = 0;
  auto s = generate(model, prompt, pmask, p);
  EXPECT_EQ(s.new_lengths[0].item<int64_t>(), 1);
  EXPECT_EQ(s.tokens[0][5].item<int64_t>(), stop);
  for (int64_t t = 6; t < s.tokens.size(1); ++t) {
    EXPECT_EQ(s.tokens[0][t].item<int64_t>(), 0);
    EXPECT_EQ(s.attention_mask[0][t].item<int64_t>(), 0);
  }
  // Sampling: same seed, same tokens; top_k = 1 is greedy; a tiny top_p is greedy too.
  SamplingParams q;
  q.temperature = 0.7;
  q.max_new_tokens = 6;
  q.seed = 5;
  auto a = generate(model, prompt, pmask, q), b = generate(model, prompt, pmask, q);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  q.seed = 6;
  q.temperature = 5.0;
  auto d = generate(model, prompt, pmask, q);
  EXPECT_FALSE(torch::equal(a.tokens, d.tokens));
  q.top_k = 1;
  EXPECT_TRUE(torch::equal(generate(model, prompt, pmask, q).tokens, g.tokens));
  q.top_k = 0;
  q.top_p = 1e-6;
  EXPECT_TRUE(torch::equal(generate(model, prompt, pmask, q).tokens, g.tokens));
}

// ---------------------------------------------------------------------------------------------
// config.json
// ---------------------------------------------------------------------------------------------

std::string with(const std::string& base_json, const std::string& extra) {
  // Later keys win in nlohmann::json, so `extra` can override the base.
  return "{" + base_json + (extra.empty() ? "" : ", ") + extra + "}";
}
const std::string kLlama =
    R"("vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4)";
const std::string kGpt2 = R"("vocab_size": 50, "n_embd": 16, "n_layer": 2, "n_head": 4)";
const std::string kNeox =
    R"("vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4)";

TEST(ModelConfigJson, Families) {
  auto l = ModelConfig::from_json_text(
      with(kLlama, R"("model_type": "llama", "num_key_value_heads": 2, "rope_theta": 500000.0,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      "eos_token_id": [7, 9], "architectures": ["LlamaForCausalLM"])"),
      "l.json");
  EXPECT_EQ(l.family, Family::llama);
  EXPECT_EQ(l.num_kv_heads, 2);
  EXPECT_EQ(l.head_dim, 4);
  EXPECT_EQ(l.rotary_dim, 4);
  EXPECT_EQ(l.rope_theta, 500000.0);
  EXPECT_EQ(l.rope_scaling.type, "llama3");
  EXPECT_EQ(l.rope_scaling.original_max_positions, 8192);
  EXPECT_EQ(*l.eos_token_id, 7);
  EXPECT_EQ(l.eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(l.architecture, "LlamaForCausalLM");
  auto q = ModelConfig::from_json_text(
      with(kLlama, R"("model_type": "qwen2", "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
                      "use_sliding_window": false, "sliding_window": 4096)"),
      "q.json");
  EXPECT_TRUE(q.attention_bias);
  EXPECT_EQ(q.rope_theta, 1e6);
  EXPECT_EQ(q.rope_scaling.type, "none");
  auto m = ModelConfig::from_json_text(with(kLlama, R"("model_type": "mistral", "sliding_window": null)"), "m.json");
  EXPECT_FALSE(m.attention_bias);
  // Qwen3: q/k norms; Qwen3Config's defaults where keys are absent (head_dim 128, 32 key/value
  // heads, no biases); explicit ones as given; its window keys as Qwen2's.
  auto q3 = ModelConfig::from_json_text(
      with(kLlama, R"("model_type": "qwen3", "num_attention_heads": 32, "architectures": ["Qwen3ForCausalLM"])"),
      "q3.json");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.num_kv_heads, 32);
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_EQ(q3.sliding_window, 0);
  auto q3b = ModelConfig::from_json_text(
      with(kLlama, R"("model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 12, "attention_bias": true,
                      "use_sliding_window": true, "sliding_window": 5, "max_window_layers": 1)"),
      "q3b.json");
  EXPECT_EQ(q3b.head_dim, 12);
  EXPECT_EQ(q3b.num_kv_heads, 2);
  EXPECT_TRUE(q3b.attention_bias);
  EXPECT_EQ(q3b.sliding_window, 5);
  EXPECT_EQ(q3b.sliding_layers, (std::vector<bool>{false, true}));
  EXPECT_FALSE(l.qk_norm);
  EXPECT_FALSE(q.qk_norm);
  auto g = ModelConfig::from_json_text(with(kGpt2, R"("model_type": "gpt2", "n_inner": null)"), "g.json");
  EXPECT_EQ(g.family, Family::gpt2);
  EXPECT_EQ(g.intermediate_size, 64);
  EXPECT_EQ(g.max_positions, 1024);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(g.rotary_dim, 0);
  auto j = ModelConfig::from_json_text(with(kGpt2, R"("model_type": "gptj", "rotary_dim": 2)"), "j.json");
  EXPECT_TRUE(j.parallel_residual);
  EXPECT_EQ(j.rotary_dim, 2);
  auto n = ModelConfig::from_json_text(
      with(kNeox, R"("model_type": "gpt_neox", "rotary_pct": 0.5, "rotary_emb_base": 20000, "use_parallel_residual": false)"),
      "n.json");
  EXPECT_EQ(n.rotary_dim, 2);
  EXPECT_EQ(n.rope_theta, 20000.0);
  EXPECT_FALSE(n.parallel_residual);
  auto n5 = ModelConfig::from_json_text(
      with(kNeox, R"("model_type": "gpt_neox", "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_type": "default"}, "rotary_pct": 0.25)"),
      "n5.json");
  EXPECT_EQ(n5.rotary_dim, 2);  // rope_parameters wins over the legacy key, as in transformers
  auto odd = ModelConfig::from_json_text(with(kNeox, R"("model_type": "gpt_neox")"), "odd.json");
  EXPECT_EQ(odd.rotary_dim, 1);  // int(4 * 0.25); transformers rotates 2 dims then
  EXPECT_EQ(rotary_inv_freq(odd, 8).numel(), 1);
  // Round trip through to_json for every family.
  for (const auto& cfg : {l, q, m, q3b, g, j, n}) {
    auto back = ModelConfig::from_json_text(cfg.to_json(architecture_name(cfg, Head::causal_lm), "float32"), "rt");
    EXPECT_EQ(back.hidden_size, cfg.hidden_size);
    EXPECT_EQ(back.num_kv_heads, cfg.num_kv_heads);
    EXPECT_EQ(back.rotary_dim, cfg.rotary_dim);
    EXPECT_EQ(back.rope_theta, cfg.rope_theta);
    EXPECT_EQ(back.rope_scaling.type, cfg.rope_scaling.type);
    EXPECT_EQ(back.intermediate_size, cfg.intermediate_size);
    EXPECT_EQ(back.parallel_residual, cfg.parallel_residual);
    EXPECT_EQ(back.tie_word_embeddings, cfg.tie_word_embeddings);
    EXPECT_EQ(back.eos_token_ids, cfg.eos_token_ids);
    EXPECT_EQ(back.head_dim, cfg.head_dim);
    EXPECT_EQ(back.qk_norm, cfg.qk_norm);
    EXPECT_EQ(back.attention_bias, cfg.attention_bias);
    EXPECT_EQ(back.sliding_window, cfg.sliding_window);
    EXPECT_EQ(back.sliding_layers, cfg.sliding_layers);
  }
  // Llama 3.1's original_max_position_embeddings: the rope's own, or the top-level key, which
  // wins as in transformers' standardize_rope_params.
  const std::string llama3 = R"("model_type": "llama", "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})";
  EXPECT_EQ(ModelConfig::from_json_text(with(kLlama, llama3), "o.json").rope_scaling.original_max_positions, 8192);
  EXPECT_EQ(ModelConfig::from_json_text(with(kLlama, llama3 + R"(, "original_max_position_embeddings": 4096)"), "o.json")
                .rope_scaling.original_max_positions,
            4096);
}

TEST(ModelConfigJson, Refusals) {
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(R"({"model_type": "bert"})", "config.json"),
                   "config.json: model_type 'bert' is not supported (llama, mistral, qwen2, qwen3, gpt2, gptj, gpt_neox)");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kLlama, ""), "c.json"), "c.json: key 'model_type' is missing");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text("{", "c.json"), "c.json: not valid JSON");
  struct Fam {
    std::string type, body, missing, arch_ok;
  };
  for (const Fam& f : {Fam{"llama", kLlama, "intermediate_size", "LlamaForSequenceClassification"},
                       Fam{"mistral", kLlama, "num_attention_heads", "MistralForTokenClassification"},
                       Fam{"qwen2", kLlama, "vocab_size", "Qwen2ForCausalLM"},
                       Fam{"qwen3", kLlama, "hidden_size", "Qwen3ForSequenceClassification"},
                       Fam{"gpt2", kGpt2, "n_embd", "GPT2LMHeadModel"},
                       Fam{"gptj", kGpt2, "n_layer", "GPTJForCausalLM"},
                       Fam{"gpt_neox", kNeox, "hidden_size", "GPTNeoXForTokenClassification"}}) {
    const std::string type = "\"model_type\": \"" + f.type + "\"";
    const std::string extra = f.type == "mistral"    ? ", \"sliding_window\": null"
                              : f.type == "qwen3"    ? ", \"num_key_value_heads\": 2"
                              : f.type == "gptj"     ? ", \"rotary_dim\": 2"
                              : f.type == "gpt_neox" ? ", \"rotary_pct\": 0.5"
                                                     : "";
    // The valid one parses.
    EXPECT_NO_THROW(ModelConfig::from_json_text(
        with(f.body, type + extra + ", \"architectures\": [\"" + f.arch_ok + "\"]"), "ok.json"))
        << f.type;
    // Unknown architecture, named.
    EXPECT_ERROR_HAS(
        ModelConfig::from_json_text(with(f.body, type + extra + R"(, "architectures": ["BertForMaskedLM"])"), "a.json"),
        "a.json: architectures 'BertForMaskedLM' is not supported for model_type '" + f.type + "'");
    // Missing key, named.
    std::string body = f.body;
    auto at = body.find("\"" + f.missing + "\"");
    ASSERT_NE(at, std::string::npos);
    auto end = body.find(',', at);
    body.erase(at, end == std::string::npos ? std::string::npos : end - at + 1);
    if (body.back() == ' ' || body.back() == ',') body = body.substr(0, body.find_last_not_of(", ") + 1);
    EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(body, type + extra), "k.json"),
                     "k.json: key '" + f.missing + "' is missing")
        << f.type;
    // Unknown rope type, named (GPT-2 and GPT-J read no rope parameters).
    if (f.type != "gpt2" && f.type != "gptj") {
      EXPECT_ERROR_HAS(ModelConfig::from_json_text(
                           with(f.body, type + extra + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})"),
                           "r.json"),
                       "r.json: rope_scaling.rope_type 'yarn' is not supported")
          << f.type;
    }
  }
  // Every other rope type, in either layout, named with its key; a rope per layer type refused.
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(
                       with(kLlama, R"("model_type": "qwen3", "num_key_value_heads": 2,
                                       "rope_scaling": {"type": "longrope", "factor": 4.0})"),
                       "lr.json"),
                   "lr.json: rope_scaling.type 'longrope' is not supported (default, linear, dynamic, llama3)");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(
                       with(kLlama, R"("model_type": "mistral", "sliding_window": 4,
                                       "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6})"),
                       "y.json"),
                   "y.json: rope_parameters.rope_type 'yarn' is not supported");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(
                       with(kLlama, R"("model_type": "qwen3", "num_key_value_heads": 2, "rope_parameters":
                                       {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})"),
                       "pl.json"),
                   "pl.json: rope_parameters.full_attention is a rope per layer type, which is not supported");
  // Qwen3 slides where its layers say, and only with a window.
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(
                       with(kLlama, R"("model_type": "qwen3", "num_key_value_heads": 2, "use_sliding_window": false,
                                       "layer_types": ["full_attention", "sliding_attention"])"),
                       "w.json"),
                   "w.json: layer_types names sliding_attention layers, but there is no window");
  // Sliding windows are implemented now (test_model.cpp SlidingWindow.*); a non-positive one is refused.
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kLlama, R"("model_type": "mistral", "sliding_window": 0)"), "s.json"),
                   "s.json: sliding_window 0 must be positive");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kGpt2, R"("model_type": "gptj", "rotary_dim": null)"), "j.json"),
                   "j.json: rotary_dim null");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kLlama, R"("model_type": "llama", "num_key_value_heads": 3)"),
                                               "h.json"),
                   "h.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kLlama, R"("model_type": "llama", "hidden_act": "mish")"),
                                               "h.json"),
                   "h.json: hidden_act 'mish' is not supported");
  EXPECT_ERROR_HAS(ModelConfig::from_json_text(with(kLlama, R"("model_type": "llama", "vocab_size": "many")"),
                                               "h.json"),
                   "h.json: vocab_size must be an integer");
}

}  // namespace

}  // namespace test_transformer_internals
