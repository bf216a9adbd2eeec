// Parity of the LibTorch transformers with Hugging Face transformers. The fixture
// tests/parity/make_models.py writes tiny random HF models (every family, every head) to
// $QUARTET_PARITY_DIR/models/<name>_<head>/ with reference.safetensors beside the weights: a
// left-padded batch and HF's outputs for it (see the script's docstring for every tensor).
// Every check here compares against those numbers at 1e-4 relative error (max |a - b| / max |b|)
// in fp32, or token for token, or bit for bit.
#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <sys/stat.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/transformer.hpp"

using quartet::Head;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_model {

namespace {

constexpr double kRelTol = 1e-4;          // the issue: "<= 1e-4 relative error in fp32"
constexpr int64_t kNewTokens = 8;          // gen_tokens per sequence (make_models.py N_NEW)
constexpr int64_t kCacheSteps = 3;         // incremental steps after the prompt
constexpr size_t kExpectedModels = 27;     // make_models.py plan(): 15 LM + 5 value + 7 reward
constexpr size_t kExpectedV4Configs = 22;  // dirs whose config has a transformers-4 layout too

// Every (name, head) the script must have written; a missing one fails ReferenceSet.Complete.
const std::vector<std::string> kRequired = {
    "llama_causal_lm", "llama_tied_causal_lm", "llama_rope_llama3_causal_lm",
    "llama_rope_llama3_long_causal_lm", "llama_rope_linear_causal_lm", "mistral_causal_lm",
    "qwen2_causal_lm", "qwen3_causal_lm", "qwen3_sliding_causal_lm", "gpt2_causal_lm",
    "gptj_causal_lm", "gpt_neox_causal_lm", "gpt_neox_seq_causal_lm",
    "mistral_sliding_causal_lm", "qwen2_sliding_causal_lm", "qwen2_sliding_sequence_reward",
    "llama_token_value", "qwen2_token_value", "qwen3_token_value", "gpt2_token_value",
    "gpt_neox_token_value", "llama_sequence_reward", "qwen2_sequence_reward", "qwen3_sequence_reward",
    "gpt2_sequence_reward",
    "gpt_neox_sequence_reward", "gptj_sequence_reward"};

std::string models_dir() {
  const char* p = std::getenv("QUARTET_PARITY_DIR");
  return p ? std::string(p) + "/models" : std::string();
}

// POSIX, not std::filesystem: libtorch.so exports its own copies of std::filesystem's free
// functions, and its remove_all crashes when bound in place of libstdc++'s.
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + from);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.close();
  if (!out) throw std::runtime_error("cannot write " + to);
}

// Sorted names of the reference directories (those holding reference.safetensors).
std::vector<std::string> reference_names() {
  std::vector<std::string> out;
  const std::string root = models_dir();
  if (root.empty()) return out;
  if (DIR* d = ::opendir(root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != ".." && exists(root + "/" + n + "/reference.safetensors"))
        out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> causal_names() {
  std::vector<std::string> out;
  const std::string suffix = "_causal_lm";  // make_models.py names directories <name>_<head>
  for (const auto& n : reference_names())
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(n);
  return out;
}

Head head_from(const std::string& s) {
  if (s == "causal_lm") return Head::causal_lm;
  if (s == "token_value") return Head::token_value;
  if (s == "sequence_reward") return Head::sequence_reward;
  throw std::runtime_error("reference.safetensors names an unknown head '" + s + "'");
}

const char* output_key(Head h) {
  switch (h) {
    case Head::causal_lm: return "logits";
    case Head::token_value: return "values";
    case Head::sequence_reward: return "scores";
  }
  return "?";
}

std::string shape_str(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// max |a - b| / max |b| <= tol, shapes equal, nothing NaN.
::testing::AssertionResult close(const torch::Tensor& actual, const torch::Tensor& expected,
                                 double tol = kRelTol) {
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(actual) << " != expected " << shape_str(expected);
  auto a = actual.detach().to(torch::kCPU, torch::kDouble);
  auto b = expected.detach().to(torch::kCPU, torch::kDouble);
  if (b.numel() == 0) return ::testing::AssertionFailure() << "empty tensors compared";
  const double err = (a - b).abs().max().item<double>();
  const double scale = b.abs().max().item<double>();
  if (err <= tol * scale)  // NaN fails here too
    return ::testing::AssertionSuccess() << "max|a-b| " << err << " max|b| " << scale;
  const int64_t at = (a - b).abs().flatten().argmax().item<int64_t>();
  return ::testing::AssertionFailure()
         << "max|a-b| = " << err << ", max|b| = " << scale << ", relative " << err / scale
         << " > " << tol << " (worst at flat index " << at << ": "
         << a.flatten()[at].item<double>() << " vs " << b.flatten()[at].item<double>() << ")";
}

// Rows of out [B, T, ...] where mask [B, T] is 1.
torch::Tensor real_positions(const torch::Tensor& out, const torch::Tensor& mask) {
  return out.index({mask.to(torch::kBool)});
}

// The repository root: $QUARTET_SOURCE_DIR (ctest sets it), else two levels above this file.
std::string source_root() {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  const std::string file = __FILE__;  // <root>/tests/unit/test_model.cpp
  return src && *src ? std::string(src) : file.substr(0, file.rfind('/')) + "/../..";
}

// max |a - b| / max |b| (NaN if anything is NaN).
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  auto x = a.detach().to(torch::kCPU, torch::kDouble), y = b.detach().to(torch::kCPU, torch::kDouble);
  return (x - y).abs().max().item<double>() / y.abs().max().item<double>();
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/quartet_test_model_" + tag + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = buf.data();
  }
  ~TempDir() { remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path; }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// One reference directory: the model's HF dir and its reference tensors.
struct Reference {
  std::string name, dir;
  Head head = Head::causal_lm;
  std::map<std::string, std::string> meta;
  std::unique_ptr<quartet::SafetensorsFile> file;

  explicit Reference(const std::string& n) : name(n), dir(models_dir() + "/" + n) {
    file = std::make_unique<quartet::SafetensorsFile>(dir + "/reference.safetensors");
    meta = file->metadata();
    head = head_from(meta.at("head"));
  }
  torch::Tensor get(const std::string& k) const { return file->get(k); }
  bool has(const std::string& k) const { return file->has(k); }
  quartet::Transformer load(const std::string& from = "") const {
    auto m = quartet::load_model(from.empty() ? dir : from, head, torch::kFloat,
                                 torch::Device(torch::kCPU));
    m->eval();
    return m;
  }
};

torch::Tensor forward(quartet::Transformer& m, const torch::Tensor& ids, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  return m->forward(ids, mask);
}

// Runs fn, which must throw quartet::Error whose message names every one of `needles`.
::testing::AssertionResult throws_naming(const std::function<void()>& fn,
                                         const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const quartet::Error& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      if (what.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "the error does not name '" << n << "': " << what;
    return ::testing::AssertionSuccess() << what;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than quartet::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// ------------------------------------------------------------------------------------------
// The reference set itself: a broken or partial fixture fails here, loudly.
// ------------------------------------------------------------------------------------------

TEST(ReferenceSet, Complete) {
  ASSERT_FALSE(models_dir().empty()) << "QUARTET_PARITY_DIR is not set (ctest sets it)";
  const auto names = reference_names();
  ASSERT_GE(names.size(), kExpectedModels)
      << "make_models.py wrote " << names.size() << " reference dirs under " << models_dir();
  EXPECT_GE(causal_names().size(), 15u);
  for (const auto& r : kRequired)
    EXPECT_TRUE(std::find(names.begin(), names.end(), r) != names.end()) << "missing " << r;
  size_t v4 = 0;
  for (const auto& n : names) v4 += exists(models_dir() + "/" + n + "/config_v4.json");
  EXPECT_GE(v4, kExpectedV4Configs);
}

// ------------------------------------------------------------------------------------------
// Per model: one parameterised suite, each test named after the reference directory.
// ------------------------------------------------------------------------------------------

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ref_ = std::make_unique<Reference>(GetParam()); }
  std::unique_ptr<Reference> ref_;
};

TEST_P(Parity, ForwardMatchesHF) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const auto expected = ref_->get(output_key(ref_->head));
  const auto out = forward(model, ids, mask);
  ASSERT_EQ(out.scalar_type(), torch::kFloat);
  ASSERT_EQ(out.sizes(), expected.sizes()) << shape_str(out) << " vs " << shape_str(expected);
  if (ref_->head == Head::sequence_reward) {
    EXPECT_TRUE(close(out, expected)) << "scores " << out << " vs HF " << expected;
    for (int64_t b = 0; b < out.size(0); ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      EXPECT_LE(std::abs(out[b].item<double>() - expected[b].item<double>()),
                kRelTol * expected.abs().max().item<double>());
    }
  } else {
    EXPECT_TRUE(close(real_positions(out, mask), real_positions(expected, mask)));
  }
}

// Packed (model/packed_sequences.hpp): the rows' real tokens back to back in one row, each
// sequence attending within itself (one SDPA a sequence here), give HF's outputs at the real
// positions (every head: logits, values, and the reward at each sequence's last token).
torch::Tensor packed_forward(quartet::Transformer& model, const torch::Tensor& ids, const torch::Tensor& mask) {
  const auto n = mask.ne(0).sum(1).to(torch::kCPU, torch::kLong).contiguous();
  const std::vector<int64_t> lengths(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel());
  const auto packed = quartet::pack_rows(ids, mask, lengths);
  const auto at = model->head() == Head::sequence_reward
                      ? packed.cu_seqlens.narrow(0, 1, packed.sequences()).to(torch::kLong) - 1
                      : torch::arange(packed.tokens(), ids.options().dtype(torch::kLong));
  return model->head_at(model->packed_hidden_states(packed), at).squeeze(0);
}

TEST_P(Parity, PackedForwardMatchesHF) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const auto expected = ref_->get(output_key(ref_->head));
  torch::NoGradGuard no_grad;
  const auto out = packed_forward(model, ids, mask);
  if (ref_->head == Head::sequence_reward)
    EXPECT_TRUE(close(out, expected)) << "scores " << out << " vs HF " << expected;
  else
    EXPECT_TRUE(close(out, real_positions(expected, mask)));
}

TEST_P(Parity, LeftPaddingMatchesEachSequenceAlone) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const std::string key = output_key(ref_->head);
  const auto out = forward(model, ids, mask);
  const int64_t B = ids.size(0), T = ids.size(1);
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const auto alone_hf = ref_->get(key + "_seq" + std::to_string(b));
    const int64_t n = mask[b].sum().item<int64_t>();
    // The left-padded batch, row b, at its real positions, against HF on the sequence alone.
    const auto seq = ids.slice(0, b, b + 1).slice(1, T - n, T);
    const auto alone = forward(model, seq, torch::ones_like(seq));
    if (ref_->head == Head::sequence_reward) {
      EXPECT_TRUE(close(out.slice(0, b, b + 1), alone_hf));
      EXPECT_TRUE(close(alone.reshape({-1}), alone_hf));
    } else {
      ASSERT_EQ(alone_hf.size(0), n);
      EXPECT_TRUE(close(out[b].slice(0, T - n, T), alone_hf));
      EXPECT_TRUE(close(alone[0], alone_hf));
    }
  }
}

// Each sequence alone with padding after it, run as PaddingLayout::trailing (attention without
// a mask, the scoring and training paths' form for such batches): its real positions (a reward
// head's score: at its last real token) as HF's on the sequence alone, and as the masked
// forward's on the same input.
TEST_P(Parity, TrailingPaddingWithoutAMaskMatchesHF) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const std::string key = output_key(ref_->head);
  const int64_t B = ids.size(0), T = ids.size(1), pad = 3;
  torch::NoGradGuard no_grad;
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const int64_t n = mask[b].sum().item<int64_t>();
    const auto seq = torch::cat({ids.slice(0, b, b + 1).slice(1, T - n, T), torch::full({1, pad}, 1, torch::kLong)}, 1);
    const auto seq_mask = torch::cat({torch::ones({1, n}, torch::kLong), torch::zeros({1, pad}, torch::kLong)}, 1);
    const auto causal =
        model->head_output(model->hidden_states(seq, seq_mask, nullptr, quartet::PaddingLayout::trailing), seq_mask);
    const auto masked = model->head_output(model->hidden_states(seq, seq_mask), seq_mask);
    const auto alone_hf = ref_->get(key + "_seq" + std::to_string(b));
    if (ref_->head == Head::sequence_reward) {
      EXPECT_TRUE(close(causal.reshape({-1}), alone_hf));
      EXPECT_TRUE(close(causal, masked));
    } else {
      EXPECT_TRUE(close(causal[0].slice(0, 0, n), alone_hf));
      EXPECT_TRUE(close(causal[0].slice(0, 0, n), masked[0].slice(0, 0, n)));
    }
  }
}

// The left-padded reference batch with padding after it too, run as PaddingLayout::around
// (each row shifted so that its padding trails, attention without a mask, shifted back): HF's
// outputs at the real positions.
TEST_P(Parity, LeftPaddedBatchWithoutAMaskMatchesHF) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const auto expected = ref_->get(output_key(ref_->head));
  const int64_t B = ids.size(0), pad = 3;
  ASSERT_TRUE((mask.select(1, 0) == 0).any().item<bool>()) << "the reference batch has no left padding";
  const auto padded = torch::cat({ids, torch::full({B, pad}, 1, torch::kLong)}, 1);
  const auto padded_mask = torch::cat({mask, torch::zeros({B, pad}, mask.options())}, 1);
  torch::NoGradGuard no_grad;
  const auto out =
      model->head_output(model->hidden_states(padded, padded_mask, nullptr, quartet::PaddingLayout::around), padded_mask);
  if (ref_->head == Head::sequence_reward) {
    EXPECT_TRUE(close(out, expected));
  } else {
    EXPECT_TRUE(close(real_positions(out, padded_mask), real_positions(expected, mask)));
  }
}

// Generation and incremental decoding: the causal LM directories only.
class CausalParity : public Parity {
 protected:
  void SetUp() override {
    Parity::SetUp();
    ASSERT_EQ(ref_->head, Head::causal_lm) << GetParam() << " is not a causal LM reference";
  }
};

TEST_P(CausalParity, GreedyGenerationMatchesHF) {
  auto model = ref_->load();
  const auto prompt = ref_->get("gen_prompt"), prompt_mask = ref_->get("gen_prompt_mask");
  const auto expected = ref_->get("gen_tokens");
  ASSERT_EQ(expected.size(1), kNewTokens);
  quartet::SamplingParams p;
  p.temperature = 0.0;
  p.max_new_tokens = kNewTokens;
  p.pad_id = model->config().pad_token_id.value_or(0);
  p.stop_ids.clear();  // HF ran all 8 steps with no stop token
  quartet::Generation g;
  {
    torch::NoGradGuard no_grad;
    g = quartet::generate(model, prompt, prompt_mask, p);
  }
  const int64_t T = prompt.size(1);
  ASSERT_EQ(g.tokens.sizes(), (std::vector<int64_t>{prompt.size(0), T + kNewTokens}));
  EXPECT_TRUE(torch::equal(g.tokens.slice(1, 0, T).to(torch::kLong), prompt))
      << "the prompt part of the generation changed";
  const auto got = g.tokens.slice(1, T, T + kNewTokens).to(torch::kLong);
  EXPECT_TRUE(torch::equal(got, expected))
      << "C++ greedy:\n" << got << "\nHF generate:\n" << expected
      << "\n(smallest HF top-1/top-2 logit margin " << ref_->get("gen_margin").item<double>() << ")";
  EXPECT_TRUE(torch::equal(g.new_lengths.to(torch::kLong),
                           torch::full({prompt.size(0)}, kNewTokens, torch::kLong)))
      << g.new_lengths;
  EXPECT_TRUE(torch::equal(g.attention_mask.to(torch::kLong),
                           torch::cat({prompt_mask, torch::ones_like(expected)}, 1)))
      << g.attention_mask;
}

// HF's greedy tokens cut at the first stop token (which is kept), padding after it; the
// lengths; and how many times the decoder must move its live rows to a smaller batch when it
// checks after every step (the live count drops to a lower power of two).
struct StoppedReference {
  torch::Tensor tokens, lengths;
  int64_t compactions = 0;
};
StoppedReference stopped(const torch::Tensor& hf, const std::vector<int64_t>& stops, int64_t pad) {
  const int64_t B = hf.size(0), N = hf.size(1);
  StoppedReference r{hf.clone(), torch::full({B}, N, torch::kLong), 0};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < N; ++t)
      if (std::count(stops.begin(), stops.end(), hf[b][t].item<int64_t>())) {
        r.tokens[b].slice(0, t + 1).fill_(pad);
        r.lengths[b] = t + 1;
        break;
      }
  auto pow2 = [](int64_t n) { int64_t p = 1; while (p < n) p *= 2; return p; };
  int64_t rows = B;
  for (int64_t k = 1; k < N; ++k) {
    const int64_t live = (r.lengths > k).sum().item<int64_t>();  // rows still going before step k
    if (live == 0) break;
    if (pow2(live) < rows) { rows = pow2(live); ++r.compactions; }
  }
  return r;
}

// Stop ids that end HF's greedy rows early and at different steps: a later token of row 0 and of
// row 1, none of them any row's first token (which would end every row at once).
std::vector<int64_t> later_stops(const torch::Tensor& hf) {
  const int64_t B = hf.size(0);
  std::set<int64_t> firsts;
  for (int64_t b = 0; b < B; ++b) firsts.insert(hf[b][0].item<int64_t>());
  std::vector<int64_t> stops;
  // (Tiny random models often repeat a few ids; then any later token of the row will do.)
  for (int64_t row : {int64_t{0}, std::min<int64_t>(1, B - 1)}) {
    int64_t pick = hf[row][std::min<int64_t>(row + 1, hf.size(1) - 1)].item<int64_t>();
    for (int64_t t = row + 1; t < hf.size(1); ++t)
      if (!firsts.count(hf[row][t].item<int64_t>())) {
        pick = hf[row][t].item<int64_t>();
        break;
      }
    stops.push_back(pick);
  }
  return stops;
}

// Stop tokens end rows at different steps; checked after every step, finished rows leave the
// batch (the live ones move to the front of a smaller one) and their results must still come
// back in the caller's order, equal to HF's tokens up to the stop.
TEST_P(CausalParity, StopTokensAndShrinkingBatchMatchHF) {
  auto model = ref_->load();
  const auto prompt = ref_->get("gen_prompt"), prompt_mask = ref_->get("gen_prompt_mask");
  const auto hf = ref_->get("gen_tokens");
  const int64_t B = prompt.size(0), T = prompt.size(1);
  const std::vector<int64_t> stops = later_stops(hf);
  quartet::SamplingParams p;
  p.temperature = 0.0;
  p.max_new_tokens = kNewTokens;
  p.pad_id = model->config().pad_token_id.value_or(0);
  p.stop_ids = stops;
  const auto want = stopped(hf, stops, p.pad_id);
  const int64_t width = want.lengths.max().item<int64_t>();
  std::string lengths;
  for (int64_t b = 0; b < B; ++b) lengths += (b ? " " : "") + std::to_string(want.lengths[b].item<int64_t>());
  std::printf("[stops] %-30s lengths %s of %lld, batch shrinks %lld times\n", ref_->name.c_str(), lengths.c_str(),
              (long long)kNewTokens, (long long)want.compactions);
  // (check_every, check_lag): the host acting on each step's count at once, or some steps later.
  for (auto [every, lag] : std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {1, 2}, {3, 0}, {3, 5}, {1000, 2}}) {
    p.check_every = every;
    p.check_lag = lag;
    const std::string what = "check_every " + std::to_string(every) + ", check_lag " + std::to_string(lag);
    quartet::Generation g = quartet::generate(model, prompt, prompt_mask, p);
    ASSERT_EQ(g.tokens.sizes(), (std::vector<int64_t>{B, T + width})) << what;
    EXPECT_TRUE(torch::equal(g.tokens.slice(1, T), want.tokens.slice(1, 0, width)))
        << what << "\nquartet:\n" << g.tokens.slice(1, T) << "\nHF, cut at the stops:\n"
        << want.tokens.slice(1, 0, width);
    EXPECT_TRUE(torch::equal(g.new_lengths, want.lengths)) << what << ": " << g.new_lengths << " vs " << want.lengths;
    const auto real = torch::arange(width).unsqueeze(0) < want.lengths.unsqueeze(1);
    EXPECT_TRUE(torch::equal(g.attention_mask.slice(1, T), real.to(torch::kLong))) << what << g.attention_mask;
    if (every == 1 && lag == 0) {
      EXPECT_EQ(g.stats.compactions, want.compactions);
    }
    if (every == 1 && lag > 0) {
      // The same counts, acted on `lag` steps later: the same cuts, less those that would come
      // after the last step.
      EXPECT_LE(g.stats.compactions, want.compactions) << what;
    }
    if (every == 1000) {
      EXPECT_EQ(g.stats.compactions, 0);
      EXPECT_EQ(g.stats.checks, 0);
    }
  }
  // Before min_new_tokens tokens no row can stop, and the host reads nothing back: with it at
  // max_new_tokens, not once.
  p.check_every = 1;
  p.check_lag = 0;
  p.min_new_tokens = kNewTokens;
  quartet::Generation full = quartet::generate(model, prompt, prompt_mask, p);
  EXPECT_EQ(full.stats.checks, 0);
  EXPECT_TRUE(torch::equal(full.new_lengths, torch::full({B}, kNewTokens, full.new_lengths.options())))
      << full.new_lengths;
  p.min_new_tokens = kNewTokens - 2;  // a stop possible from the last token on: one check
  quartet::Generation late = quartet::generate(model, prompt, prompt_mask, p);
  EXPECT_EQ(late.stats.checks, 1);
}

// GRPO's samples of a prompt share its forward pass (SamplingParams::prompt_group): greedy and
// sampled tokens, with stops and the cache handed back, are those of one pass per row.
TEST_P(CausalParity, SharedPromptPassGivesTheTokensOfOnePassPerRow) {
  auto model = ref_->load();
  const int64_t group = 3;
  const auto prompt = ref_->get("gen_prompt").repeat_interleave(group, 0);
  const auto prompt_mask = ref_->get("gen_prompt_mask").repeat_interleave(group, 0);
  const auto hf = ref_->get("gen_tokens");
  const int64_t T = prompt.size(1);
  quartet::SamplingParams p;
  p.max_new_tokens = kNewTokens;
  p.pad_id = model->config().pad_token_id.value_or(0);
  p.keep_cache = true;
  for (double temperature : {0.0, 1.0}) {
    for (bool with_stops : {false, true}) {
      p.temperature = temperature;
      p.seed = 11;
      p.stop_ids.clear();
      if (with_stops) p.stop_ids = {hf[0][2].item<int64_t>()};
      const std::string what = std::string(temperature == 0.0 ? "greedy" : "sampled") + (with_stops ? ", stops" : "");
      p.prompt_group = 1;
      const quartet::Generation each = quartet::generate(model, prompt, prompt_mask, p);
      p.prompt_group = group;
      const quartet::Generation shared = quartet::generate(model, prompt, prompt_mask, p);
      EXPECT_TRUE(torch::equal(shared.tokens, each.tokens)) << what << "\n" << shared.tokens << "\n" << each.tokens;
      EXPECT_TRUE(torch::equal(shared.new_lengths, each.new_lengths)) << what;
      for (size_t l = 0; l < each.cache.k.size(); ++l)
        EXPECT_TRUE(torch::allclose(shared.cache.k[l].narrow(2, 0, T), each.cache.k[l].narrow(2, 0, T), 1e-5, 1e-6))
            << what << ": layer " << l << "'s prompt keys";
      if (temperature > 0.0) {
        // Sampling still draws each row on its own: the samples of a prompt are not all the same.
        const int64_t W = shared.tokens.size(1) - T;
        const auto rows = shared.tokens.narrow(1, T, W).reshape({-1, group, W});
        EXPECT_TRUE((rows != rows.narrow(1, 0, 1)).any().item<bool>())
            << what << ": every sample of a prompt came out the same";
      }
    }
  }
}

// Continuous batching over a paged cache (SamplingParams::decode_rows): a prompt's samples share
// its blocks, rows take waiting sequences as theirs end, blocks smaller than the prompts split
// them (each row copying the partly filled last one), and a pool too small for every row's
// whole sequence stops the youngest rows, which restart later. Greedy tokens are HF's in every
// case; sampling repeats for a seed and keeps its outputs consistent.
TEST_P(CausalParity, PagedContinuousBatchingMatchesHF) {
  auto model = ref_->load();
  const int64_t group = 2;
  const auto prompt = ref_->get("gen_prompt").repeat_interleave(group, 0);
  const auto prompt_mask = ref_->get("gen_prompt_mask").repeat_interleave(group, 0);
  const auto hf = ref_->get("gen_tokens").repeat_interleave(group, 0);
  const int64_t B = prompt.size(0), T = prompt.size(1);
  struct Case {
    int64_t rows, block, pool_tokens, every;
    bool stops;
  };
  // (rows, block, pool, check_every, stops): every row at once; refills with 2-slot blocks;
  // 3 rows over the smallest pool, with no stop token, so that every row runs its whole length.
  for (const Case& c : {Case{B, 16, 0, 8, true}, Case{2, 2, 0, 1, true}, Case{3, 3, T + kNewTokens, 1, false}}) {
    quartet::SamplingParams p;
    p.temperature = 0.0;
    p.max_new_tokens = kNewTokens;
    p.pad_id = model->config().pad_token_id.value_or(0);
    p.prompt_group = group;
    p.decode_rows = c.rows;
    p.kv_block = c.block;
    p.kv_cache_tokens = c.pool_tokens;
    p.check_every = c.every;
    p.check_lag = 1;
    if (c.stops) p.stop_ids = later_stops(hf);
    const std::string what = "rows " + std::to_string(c.rows) + ", block " + std::to_string(c.block) + ", pool " +
                             std::to_string(c.pool_tokens);
    const auto want = stopped(hf, p.stop_ids, p.pad_id);
    const int64_t width = want.lengths.max().item<int64_t>();
    const quartet::Generation g = quartet::generate(model, prompt, prompt_mask, p);
    ASSERT_EQ(g.tokens.sizes(), (std::vector<int64_t>{B, T + width})) << what;
    EXPECT_TRUE(torch::equal(g.tokens.slice(1, 0, T), prompt)) << what;
    EXPECT_TRUE(torch::equal(g.tokens.slice(1, T), want.tokens.slice(1, 0, width)))
        << what << "\nquartet:\n" << g.tokens.slice(1, T) << "\nHF:\n" << want.tokens.slice(1, 0, width);
    EXPECT_TRUE(torch::equal(g.new_lengths, want.lengths)) << what << ": " << g.new_lengths;
    const auto real = torch::arange(width).unsqueeze(0) < want.lengths.unsqueeze(1);
    EXPECT_TRUE(torch::equal(g.attention_mask, torch::cat({prompt_mask, real.to(torch::kLong)}, 1))) << what;
    EXPECT_LE(g.stats.peak_blocks, g.stats.pool_blocks) << what;
    if (c.rows < B) {
      EXPECT_GT(g.stats.refills, 0) << what << ": no row took a waiting sequence";
    }
    if (c.pool_tokens > 0) {
      EXPECT_GT(g.stats.preemptions, 0) << what << ": the small pool never ran out";
    }
  }
  // Sampling: the same tokens again for a seed, the samples of a prompt not all alike, and the
  // mask and lengths those of the tokens (each row cut after its first stop).
  quartet::SamplingParams p;
  p.temperature = 1.0;
  p.seed = 5;
  p.max_new_tokens = kNewTokens;
  p.pad_id = model->config().pad_token_id.value_or(0);
  p.prompt_group = group;
  p.decode_rows = 3;
  p.kv_block = 4;
  p.check_every = 2;
  p.stop_ids = later_stops(hf);
  const quartet::Generation a = quartet::generate(model, prompt, prompt_mask, p);
  const quartet::Generation b = quartet::generate(model, prompt, prompt_mask, p);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  const int64_t W = a.tokens.size(1) - T;
  const auto answers = a.tokens.narrow(1, T, W), answer_mask = a.attention_mask.narrow(1, T, W);
  EXPECT_TRUE(torch::equal(answer_mask.sum(1), a.new_lengths));
  EXPECT_TRUE(torch::equal(answer_mask, (torch::arange(W).unsqueeze(0) < a.new_lengths.unsqueeze(1)).to(torch::kLong)));
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = a.new_lengths[r].item<int64_t>();
    for (int64_t t = 0; t < n; ++t) {
      const bool stop = std::count(p.stop_ids.begin(), p.stop_ids.end(), answers[r][t].item<int64_t>()) > 0;
      if (t < n - 1) {
        EXPECT_FALSE(stop) << "row " << r << " goes on after a stop at " << t;
      } else if (n < kNewTokens) {
        EXPECT_TRUE(stop) << "row " << r << " ends early without a stop";
      }
    }
    EXPECT_TRUE((answers[r].slice(0, n) == p.pad_id).all().item<bool>()) << "row " << r << " pads after its end";
  }
  const auto rows = answers.reshape({-1, group, W});
  EXPECT_TRUE((rows != rows.narrow(1, 0, 1)).any().item<bool>()) << "every sample of a prompt came out the same";
}

// The prompts' real tokens through fill_paged (a packed pass) into a pool of 4-slot blocks at
// scattered slots, read back from those slots; and the keys and values a left-padded pass with
// a KVCache leaves at the same tokens. Each [layers * 2 * N, kv_heads, head_dim].
std::pair<torch::Tensor, torch::Tensor> filled_and_padded_kv(quartet::Transformer& model, const torch::Tensor& prompt,
                                                             const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  const int64_t B = prompt.size(0), T = prompt.size(1);
  const auto n = mask.ne(0).sum(1).to(torch::kCPU, torch::kLong).contiguous();
  torch::Tensor grid;
  const auto packed =
      quartet::pack_rows(prompt, mask, std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + B), &grid);
  const int64_t N = packed.tokens(), bs = 4, blocks = N / bs + 3;
  quartet::PagedKV pool = model->make_paged_cache(1, 1, blocks, bs);
  torch::manual_seed(3);  // any slots outside the scratch block, out of order
  const auto slots = (torch::randperm((blocks - 1) * bs, torch::kLong).narrow(0, 0, N) + bs).to(prompt.device());
  model->fill_paged(packed, pool, slots);
  auto cache = model->make_cache(B, T);
  model->forward(prompt, mask, &cache);
  std::vector<torch::Tensor> filled, padded;
  for (size_t l = 0; l < pool.k.size(); ++l)
    for (const auto& [from_pool, from_cache] : {std::make_pair(pool.k[l], cache.k[l]), std::make_pair(pool.v[l], cache.v[l])}) {
      const int64_t nkv = from_pool.size(2), hd = from_pool.size(3);
      filled.push_back(from_pool.view({-1, nkv, hd}).index_select(0, slots));
      padded.push_back(from_cache.permute({0, 2, 1, 3}).reshape({B * T, nkv, hd}).index_select(0, grid));
    }
  return {torch::cat(filled), torch::cat(padded)};
}

// A paged decoder's prompt pass: fill_paged leaves in the pool the keys and values of the padded
// pass with a KVCache, token for token.
TEST_P(CausalParity, FillPagedHoldsThePaddedPassKeysAndValues) {
  auto model = ref_->load();
  const auto [filled, padded] = filled_and_padded_kv(model, ref_->get("gen_prompt"), ref_->get("gen_prompt_mask"));
  EXPECT_TRUE(close(filled, padded));
}

TEST_P(CausalParity, KVCacheStepsMatchFullForward) {
  auto model = ref_->load();
  const auto prompt = ref_->get("gen_prompt"), prompt_mask = ref_->get("gen_prompt_mask");
  const auto tokens = ref_->get("gen_tokens");
  const auto hf_full = ref_->get("gen_logits");  // HF on prompt + all 8 generated tokens
  const int64_t B = prompt.size(0), T = prompt.size(1);
  const auto seq = torch::cat({prompt, tokens.slice(1, 0, kCacheSteps)}, 1);
  const auto seq_mask = torch::cat({prompt_mask, torch::ones({B, kCacheSteps}, torch::kLong)}, 1);

  torch::NoGradGuard no_grad;
  auto cache = model->make_cache(B, T + kNewTokens);
  std::vector<torch::Tensor> parts{model->forward(prompt, prompt_mask, &cache)};
  EXPECT_EQ(cache.length, T);
  for (int64_t i = 0; i < kCacheSteps; ++i) {
    const auto tok = tokens.slice(1, i, i + 1);
    parts.push_back(model->forward(tok, seq_mask.slice(1, 0, T + i + 1), &cache));
    EXPECT_EQ(cache.length, T + i + 1);
    ASSERT_EQ(parts.back().sizes(), (std::vector<int64_t>{B, 1, hf_full.size(2)}));
  }
  const auto incremental = torch::cat(parts, 1);
  const auto full = model->forward(seq, seq_mask);
  {
    SCOPED_TRACE("prompt + 3 cached steps vs one full C++ forward");
    EXPECT_TRUE(close(real_positions(incremental, seq_mask), real_positions(full, seq_mask)));
  }
  {
    SCOPED_TRACE("prompt + 3 cached steps vs HF forward over the same tokens");
    const auto hf = hf_full.slice(1, 0, T + kCacheSteps);
    EXPECT_TRUE(close(real_positions(incremental, seq_mask), real_positions(hf, seq_mask)));
  }
  {
    SCOPED_TRACE("the cached steps alone vs HF");
    EXPECT_TRUE(close(incremental.slice(1, T, T + kCacheSteps),
                      hf_full.slice(1, T, T + kCacheSteps)));
  }
}

// The static-shape decoding step (what generation runs and CUDA graphs capture) against the
// general cached forward on the same token. Loaded models keep each block's parameters in one
// buffer, so the step multiplies fused q/k/v and gate/up weights where the family allows
// (Llama without projection biases, GPT-J); a copy with every parameter in its own buffer
// takes the unfused path, and both must agree with the cached forward.
TEST_P(CausalParity, DecodeStepMatchesCachedForwardPackedOrNot) {
  auto packed = ref_->load();
  for (int64_t layer = 0; layer < packed->config().num_layers; ++layer) {
    const std::string prefix = packed->block_prefix(layer);
    torch::Tensor first;
    for (const auto& item : packed->named_parameters(true)) {
      if (item.key().rfind(prefix, 0) != 0) continue;
      if (!first.defined()) first = item.value();
      EXPECT_TRUE(item.value().storage().is_alias_of(first.storage()))
          << item.key() << " is not in its block's one buffer";
    }
  }
  auto loose = ref_->load();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : loose->parameters(true)) p.set_data(p.clone());
  }
  const auto prompt = ref_->get("gen_prompt"), prompt_mask = ref_->get("gen_prompt_mask");
  const auto next = ref_->get("gen_tokens").slice(1, 0, 1);  // [B, 1]
  const int64_t B = prompt.size(0), T = prompt.size(1);
  const auto mask = torch::cat({prompt_mask, torch::ones({B, 1}, torch::kLong)}, 1);
  torch::NoGradGuard no_grad;
  auto general_cache = packed->make_cache(B, T + 1);
  packed->forward(prompt, prompt_mask, &general_cache);
  const auto want = packed->forward(next, mask, &general_cache).squeeze(1);  // [B, V]
  for (auto* model : {&packed, &loose}) {
    const std::string what = model == &packed ? "packed parameters" : "one buffer per parameter";
    auto cache = (*model)->make_cache(B, T + 1);
    (*model)->forward(prompt, prompt_mask, &cache);
    const auto positions = prompt_mask.sum(1);  // real tokens before the new one
    const auto slot = torch::full({1}, T, torch::kLong);
    const auto got = (*model)->decode_step(next.squeeze(1), positions, slot, mask.to(torch::kBool), cache, T + 1);
    SCOPED_TRACE(what);
    EXPECT_TRUE(close(got, want));
  }
}

TEST_P(Parity, SaveModelRoundTripIsBitExact) {
  auto model = ref_->load();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const auto before = forward(model, ids, mask);
  TempDir tmp(ref_->name);
  quartet::save_model(model, tmp.str());
  ASSERT_TRUE(exists(tmp / "config.json"));
  auto again = ref_->load(tmp.str());
  const auto after = forward(again, ids, mask);
  EXPECT_TRUE(torch::equal(before, after)) << "logits changed across save_model + load_model";

  // The same tensors under the same HF names and shapes as HF's own save (tied once).
  quartet::SafetensorsCheckpoint orig(ref_->dir), saved(tmp.str());
  EXPECT_EQ(saved.names(), orig.names());
  for (const auto& n : orig.names()) {
    if (!saved.has(n)) continue;
    SCOPED_TRACE(n);
    EXPECT_EQ(saved.entry(n).shape, orig.entry(n).shape);
    EXPECT_TRUE(torch::equal(saved.get(n), orig.get(n)));
  }
  // config.json names the head's HF architecture and the model type.
  std::ifstream f(tmp / "config.json");
  const auto cfg = nlohmann::json::parse(f);
  ASSERT_TRUE(cfg.contains("architectures") && cfg["architectures"].is_array());
  EXPECT_EQ(cfg["architectures"][0].get<std::string>(), ref_->meta.at("architecture"));
  EXPECT_EQ(cfg["model_type"].get<std::string>(), ref_->meta.at("model_type"));
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;  // directory names are [a-z0-9_]
}

INSTANTIATE_TEST_SUITE_P(Models, Parity, ::testing::ValuesIn(reference_names()), param_name);
INSTANTIATE_TEST_SUITE_P(Models, CausalParity, ::testing::ValuesIn(causal_names()), param_name);
// With no reference directories these suites are empty; ReferenceSet.Complete fails instead.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CausalParity);

// ------------------------------------------------------------------------------------------
// On a GPU (the GPU machine): every model in bfloat16 on CUDA against HF's fp32 outputs.
// bf16 keeps 8 significant bits, so the error is measured against HF's own: make_models.py,
// seeing the GPU, ran the same forward with the HF model in bf16 on CUDA ({key}_hf_bf16).
// quartet may be off by at most max(3e-2, 1.5 x HF's bf16 error) of the largest fp32 output:
// 3e-2 is what two layers of bf16 rounding compound to; the factor leaves room for a different
// but equally legitimate order of bf16 operations. Instantiated only where CUDA is available.
// ------------------------------------------------------------------------------------------

constexpr double kBf16Tol = 3e-2;
constexpr double kBf16VsHF = 1.5;

class GpuBf16 : public Parity {};

TEST_P(GpuBf16, ForwardMatchesHFWithinBf16Tolerance) {
  const std::string key = output_key(ref_->head);
  ASSERT_TRUE(ref_->has(key + "_hf_bf16"))
      << ref_->dir << "/reference.safetensors has no '" << key << "_hf_bf16' although CUDA is "
      << "available here: make_models.py records HF's bf16 outputs only when its Python sees a "
      << "GPU (torch.cuda.is_available()); rerun the fixture (ctest -R parity_models) on this machine";
  auto model = quartet::load_model(ref_->dir, ref_->head, torch::kBFloat16,
                                   torch::Device(torch::kCUDA, 0));
  model->eval();
  const auto ids = ref_->get("input_ids"), mask = ref_->get("attention_mask");
  const auto expected = ref_->get(key);
  const auto hf_bf16 = ref_->get(key + "_hf_bf16");
  ASSERT_EQ(hf_bf16.sizes(), expected.sizes());
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = model->forward(ids.to(torch::kCUDA), mask.to(torch::kCUDA));
  }
  ASSERT_EQ(out.scalar_type(), torch::kBFloat16);
  out = out.to(torch::kCPU, torch::kFloat);
  ASSERT_EQ(out.sizes(), expected.sizes());
  const bool per_token = ref_->head != Head::sequence_reward;
  auto real = [&](const torch::Tensor& t) { return per_token ? real_positions(t, mask) : t; };
  const double ours = relative_error(real(out), real(expected));
  const double theirs = relative_error(real(hf_bf16), real(expected));
  const double tol = std::max(kBf16Tol, kBf16VsHF * theirs);
  std::printf("[bf16] %-34s quartet bf16 vs HF fp32 %.3e, HF bf16 vs HF fp32 %.3e, tolerance %.3e\n",
              ref_->name.c_str(), ours, theirs, tol);
  std::fflush(stdout);
  ASSERT_TRUE(std::isfinite(theirs)) << "HF's own bf16 outputs are not finite";
  EXPECT_LE(ours, tol) << "quartet's bf16 error " << ours << " exceeds max(" << kBf16Tol << ", "
                       << kBf16VsHF << " x HF's bf16 error " << theirs << ")";
}

// Packed in bf16 on CUDA: FlashAttention's varlen kernel (forward, and its backward for
// training). The per-token heads' outputs against HF's fp32 outputs with the tolerance above,
// and the gradient of a loss over the real tokens against the padded pass's gradient in bf16
// (each parameter's largest difference within 5e-2 of its largest entry). A sequence reward
// is one number a row, read at a token whose hidden state the per-token heads check: its
// error against HF is that of a handful of bf16 roundings (qwen2's padded pass comes within
// 2.9e-2 of the 3e-2 bound, its packed one 3.4e-2 on an H100), so the packed scores are held
// to the padded pass's own scores, within the same bound.
TEST_P(GpuBf16, PackedForwardAndGradientMatch) {
  const std::string key = output_key(ref_->head);
  ASSERT_TRUE(ref_->has(key + "_hf_bf16")) << "rerun the fixture (ctest -R parity_models) on this machine";
  auto model = quartet::load_model(ref_->dir, ref_->head, torch::kBFloat16, torch::Device(torch::kCUDA, 0));
  model->eval();
  const auto ids = ref_->get("input_ids").to(torch::kCUDA), mask = ref_->get("attention_mask").to(torch::kCUDA);
  const auto expected = ref_->get(key);
  const bool per_token = ref_->head != Head::sequence_reward;
  auto real = [&](const torch::Tensor& t) { return per_token ? real_positions(t, mask.to(torch::kCPU)) : t; };
  const auto packed = packed_forward(model, ids, mask);
  const double theirs = relative_error(real(ref_->get(key + "_hf_bf16")), real(expected));
  const double tol = std::max(kBf16Tol, kBf16VsHF * theirs);
  if (!per_token) {
    torch::NoGradGuard no_grad;
    const auto padded = model->forward(ids, mask).to(torch::kCPU, torch::kFloat);
    const double apart = (packed.to(torch::kCPU, torch::kFloat) - padded).abs().max().item<double>() /
                         expected.abs().max().item<double>();
    std::printf("[bf16 packed] %-27s scores vs the padded pass's %.3e (of HF's largest), tolerance %.3e\n",
                ref_->name.c_str(), apart, tol);
    EXPECT_LE(apart, tol);
    return;
  }
  const double ours = relative_error(packed.to(torch::kFloat), real(expected));
  std::printf("[bf16 packed] %-27s quartet vs HF fp32 %.3e, HF bf16 %.3e, tolerance %.3e\n", ref_->name.c_str(), ours,
              theirs, tol);
  EXPECT_LE(ours, tol);
  // The same loss through both passes: random weights on the real tokens' outputs.
  auto gen = at::detail::createCPUGenerator(3);
  const auto weights = torch::randn(packed.sizes(), gen).to(torch::kCUDA);
  auto gradients = [&](const torch::Tensor& out) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    (out.to(torch::kFloat) * weights).sum().backward();
    std::vector<torch::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().to(torch::kFloat).clone());
    return g;
  };
  const auto from_packed = gradients(packed_forward(model, ids, mask));
  const auto from_padded = gradients(real_positions(model->forward(ids, mask), mask));
  double worst = 0;
  for (size_t i = 0; i < from_packed.size(); ++i)
    if (from_padded[i].abs().max().item<double>() > 0)
      worst = std::max(worst, relative_error(from_packed[i], from_padded[i]));
  std::printf("[bf16 packed] %-27s gradient vs the padded pass's %.3e\n", ref_->name.c_str(), worst);
  EXPECT_LE(worst, 5e-2);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuBf16,
                         ::testing::ValuesIn(torch::cuda::is_available() ? reference_names()
                                                                         : std::vector<std::string>{}),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuBf16);

// On a GPU: the decoding step as a CUDA graph gives the same greedy tokens as the same step
// run eagerly, in bf16 (where any change in the order of operations would show as a changed
// token sooner or later) and in fp32 (where both must also equal HF's), with and without stop
// tokens and a shrinking batch; and sampling with graphs repeats for a seed.
class GpuGraphs : public Parity {};

TEST_P(GpuGraphs, GreedyWithGraphsEqualsWithout) {
  if (ref_->head != Head::causal_lm) GTEST_SKIP() << "not a causal LM";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto prompt = ref_->get("gen_prompt").to(cuda), prompt_mask = ref_->get("gen_prompt_mask").to(cuda);
  const auto hf = ref_->get("gen_tokens");
  const int64_t T = prompt.size(1);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto model = quartet::load_model(ref_->dir, Head::causal_lm, dtype, cuda);
    model->eval();
    quartet::SamplingParams p;
    p.temperature = 0.0;
    p.max_new_tokens = 24;  // past HF's 8, so that the graphs replay many times
    p.span_bucket = 8;      // several spans: one graph each
    p.pad_id = model->config().pad_token_id.value_or(0);
    for (bool with_stops : {false, true}) {
      p.stop_ids.clear();
      if (with_stops) p.stop_ids = {hf[0][1].item<int64_t>(), hf[hf.size(0) - 1][2].item<int64_t>()};
      p.check_every = 2;
      p.cuda_graphs = false;
      auto eager = quartet::generate(model, prompt, prompt_mask, p);
      p.cuda_graphs = true;
      auto graphed = quartet::generate(model, prompt, prompt_mask, p);
      const std::string what = std::string(dtype == torch::kFloat32 ? "fp32" : "bf16") +
                               (with_stops ? " with stops" : " without stops");
      EXPECT_EQ(eager.stats.graph_replays, 0) << what;
      EXPECT_EQ(graphed.stats.steps, eager.stats.steps) << what;
      // (Some tiny models stop every row at the first token; then nothing is left to replay.)
      if (!with_stops || eager.stats.steps >= 4) {
        EXPECT_GT(graphed.stats.graph_replays, 0) << what;
        EXPECT_GE(graphed.stats.graphs_captured, with_stops ? 1 : 2) << what;
      }
      EXPECT_TRUE(torch::equal(graphed.tokens, eager.tokens))
          << what << "\ngraphs:\n" << graphed.tokens.slice(1, T) << "\neager:\n" << eager.tokens.slice(1, T);
      EXPECT_TRUE(torch::equal(graphed.attention_mask, eager.attention_mask)) << what;
      EXPECT_TRUE(torch::equal(graphed.new_lengths, eager.new_lengths)) << what;
      // keep_cache (rollout.reuse_prompt_cache) hands the cache back with every row's prompt in
      // place, rows cut from the batch included, in the caller's order: its prompt slots are a
      // fresh prompt pass's to the bit (a cache of the same shape, so the same kernels), and
      // the tokens do not change.
      p.keep_cache = true;
      p.cache_slots = T + p.max_new_tokens + 5;
      auto kept = quartet::generate(model, prompt, prompt_mask, p);
      p.keep_cache = false;
      EXPECT_TRUE(torch::equal(kept.tokens, graphed.tokens)) << what << ": keep_cache changed the tokens";
      ASSERT_EQ(kept.cache.length, T) << what;
      ASSERT_EQ(kept.cache.max_len, p.cache_slots) << what;
      const std::string cut = what + " (" + std::to_string(kept.stats.compactions) + " cuts)";
      std::printf("[keep_cache] %-30s %s\n", ref_->name.c_str(), cut.c_str());
      quartet::KVCache fresh = model->make_cache(prompt.size(0), kept.cache.max_len);
      {
        torch::NoGradGuard no_grad;
        (void)model->next_token_logits(prompt, prompt_mask, &fresh);
      }
      for (size_t l = 0; l < fresh.k.size(); ++l) {
        EXPECT_TRUE(torch::equal(kept.cache.k[l].narrow(2, 0, T), fresh.k[l].narrow(2, 0, T))) << cut << ", layer " << l;
        EXPECT_TRUE(torch::equal(kept.cache.v[l].narrow(2, 0, T), fresh.v[l].narrow(2, 0, T))) << cut << ", layer " << l;
      }
      if (dtype == torch::kFloat32 && !with_stops) {
        auto first = graphed.tokens.slice(1, T, T + kNewTokens).to(torch::kCPU);
        EXPECT_TRUE(torch::equal(first, hf)) << "fp32 graphs vs HF:\n" << first << "\n" << hf;
      }
    }
    // Sampling inside the graph: the same seed gives the same tokens.
    p.temperature = 0.9;
    p.top_k = 20;
    p.top_p = 0.9;
    p.stop_ids.clear();
    auto a = quartet::generate(model, prompt, prompt_mask, p);
    auto b = quartet::generate(model, prompt, prompt_mask, p);
    EXPECT_TRUE(torch::equal(a.tokens, b.tokens)) << "sampling with graphs does not repeat for a seed";
    p.seed += 1;
    auto c = quartet::generate(model, prompt, prompt_mask, p);
    EXPECT_FALSE(torch::equal(a.tokens, c.tokens)) << "another seed sampled the same tokens";
  }
}

// On a GPU, paged decoding (continuous batching, SamplingParams::decode_rows) as CUDA graph
// replays gives the tokens of the same steps run eagerly, in bf16 and fp32 (where both must also
// equal HF's greedy tokens), with rows refilled and a pool small enough to stop rows; and its
// sampling repeats for a seed.
TEST_P(GpuGraphs, PagedGreedyWithGraphsEqualsWithout) {
  if (ref_->head != Head::causal_lm) GTEST_SKIP() << "not a causal LM";
  const torch::Device cuda(torch::kCUDA, 0);
  const int64_t group = 2;
  const auto prompt = ref_->get("gen_prompt").repeat_interleave(group, 0).to(cuda);
  const auto prompt_mask = ref_->get("gen_prompt_mask").repeat_interleave(group, 0).to(cuda);
  const auto hf = ref_->get("gen_tokens").repeat_interleave(group, 0);
  const int64_t T = prompt.size(1);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto model = quartet::load_model(ref_->dir, Head::causal_lm, dtype, cuda);
    model->eval();
    for (int64_t pool : {int64_t{0}, T + 24}) {
      quartet::SamplingParams p;
      p.temperature = 0.0;
      p.max_new_tokens = 24;
      p.span_bucket = 8;
      p.pad_id = model->config().pad_token_id.value_or(0);
      p.prompt_group = group;
      p.decode_rows = 3;
      p.kv_block = 4;
      p.kv_cache_tokens = pool;
      p.check_every = 2;
      const std::string what = std::string(dtype == torch::kFloat32 ? "fp32" : "bf16") + ", pool " + std::to_string(pool);
      p.cuda_graphs = false;
      auto eager = quartet::generate(model, prompt, prompt_mask, p);
      p.cuda_graphs = true;
      auto graphed = quartet::generate(model, prompt, prompt_mask, p);
      EXPECT_EQ(eager.stats.graph_replays, 0) << what;
      EXPECT_GT(graphed.stats.graph_replays, 0) << what;
      EXPECT_GT(graphed.stats.refills, 0) << what;
      if (pool > 0) {
        EXPECT_GT(graphed.stats.preemptions, 0) << what;
      }
      EXPECT_TRUE(torch::equal(graphed.tokens, eager.tokens))
          << what << "\ngraphs:\n" << graphed.tokens.slice(1, T) << "\neager:\n" << eager.tokens.slice(1, T);
      EXPECT_TRUE(torch::equal(graphed.new_lengths, eager.new_lengths)) << what;
      if (dtype == torch::kFloat32) {
        auto first = graphed.tokens.slice(1, T, T + kNewTokens).to(torch::kCPU);
        EXPECT_TRUE(torch::equal(first, hf)) << what << " vs HF:\n" << first << "\n" << hf;
      }
      p.temperature = 0.9;
      p.top_p = 0.9;
      p.stop_ids = {hf[0][1].item<int64_t>()};
      auto a = quartet::generate(model, prompt, prompt_mask, p);
      auto b = quartet::generate(model, prompt, prompt_mask, p);
      EXPECT_TRUE(torch::equal(a.tokens, b.tokens)) << what << ": paged sampling does not repeat for a seed";
    }
  }
}

// On a GPU, fill_paged (FlashAttention's varlen kernel in bf16) leaves the padded pass's keys
// and values: to fp32's rounding in fp32, and within bf16's (a few of its 2^-8 steps through
// the layers) in bf16, where a wrong slot would be off by the values' whole size.
TEST_P(GpuGraphs, FillPagedHoldsThePaddedPassKeysAndValues) {
  if (ref_->head != Head::causal_lm) GTEST_SKIP() << "not a causal LM";
  const torch::Device cuda(torch::kCUDA, 0);
  for (auto [dtype, tol] : {std::make_pair(torch::kFloat32, kRelTol), std::make_pair(torch::kBFloat16, 5e-2)}) {
    auto model = quartet::load_model(ref_->dir, Head::causal_lm, dtype, cuda);
    model->eval();
    const auto [filled, padded] =
        filled_and_padded_kv(model, ref_->get("gen_prompt").to(cuda), ref_->get("gen_prompt_mask").to(cuda));
    EXPECT_TRUE(close(filled, padded, tol)) << (dtype == torch::kFloat32 ? "fp32" : "bf16");
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuGraphs,
                         ::testing::ValuesIn(torch::cuda::is_available() ? causal_names()
                                                                         : std::vector<std::string>{}),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuGraphs);

// On a GPU: quartet's decode kernels (model/decode_kernels.hpp: rotary + query layout + cache
// writes, attention, residual add + RMSNorm, SiLU x up) against the ATen operations they
// replace, in one decoding step of every tiny causal LM. The first layer's cache is written
// before any of the rounding changes, so it must be the same bits; the logits in float32 must
// agree to float32 rounding; in bfloat16 the kernels (float32 attention and statistics) must be
// no less accurate than ATen against the float32 step; and 24 greedy float32 tokens with CUDA
// graphs must be the same.
class GpuKernels : public Parity {};

TEST_P(GpuKernels, DecodeStepWithKernelsAgreesWithout) {
  if (ref_->head != Head::causal_lm) GTEST_SKIP() << "not a causal LM";
  ASSERT_TRUE(quartet::decode_kernels_enabled()) << "this CUDA build has no decode kernels (no CUDA compiler?)";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto prompt = ref_->get("gen_prompt").to(cuda), prompt_mask = ref_->get("gen_prompt_mask").to(cuda);
  const auto next = ref_->get("gen_tokens").slice(1, 0, 1).to(cuda);
  const int64_t B = prompt.size(0), T = prompt.size(1);
  const auto mask = torch::cat({prompt_mask, torch::ones({B, 1}, prompt_mask.options())}, 1);
  struct Out {
    torch::Tensor logits;
    quartet::KVCache cache;
  };
  torch::NoGradGuard no_grad;
  // attention: quartet's attention kernel where it applies (bf16 heads of 128), else ATen's products.
  const bool attention_was = quartet::decode_attention_enabled();
  auto step = [&](quartet::Transformer& model, bool kernels, bool attention = false) {
    quartet::set_decode_kernels(kernels);
    quartet::set_decode_attention(attention);
    Out o{torch::Tensor(), model->make_cache(B, T + 1)};
    model->forward(prompt, prompt_mask, &o.cache);
    o.logits = model->decode_step(next.squeeze(1), prompt_mask.sum(1), torch::full({1}, T, prompt.options()),
                                  mask.to(torch::kBool), o.cache, T + 1);
    quartet::set_decode_kernels(true);
    quartet::set_decode_attention(attention_was);
    return o;
  };
  auto fp32 = quartet::load_model(ref_->dir, Head::causal_lm, torch::kFloat32, cuda);
  fp32->eval();
  const Out exact = step(fp32, false);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto model = quartet::load_model(ref_->dir, Head::causal_lm, dtype, cuda);
    model->eval();
    const auto without = step(model, false);
    for (bool attention : {false, true}) {
      const auto with = step(model, true, attention);
      const std::string what =
          std::string(dtype == torch::kFloat32 ? "fp32" : "bf16") + (attention ? " + attention kernel" : "");
      EXPECT_TRUE(torch::equal(with.cache.k[0], without.cache.k[0])) << what << ": keys of layer 0";
      EXPECT_TRUE(torch::equal(with.cache.v[0], without.cache.v[0])) << what << ": values of layer 0";
      // The largest error of one step's logits is a noisy statistic in bf16 (either path may land
      // a rounding badly on one logit); the mean error over all logits is not.
      auto mean_error = [&](const torch::Tensor& a) {
        auto x = a.to(torch::kCPU, torch::kDouble), y = exact.logits.to(torch::kCPU, torch::kDouble);
        return (x - y).abs().mean().item<double>() / y.abs().mean().item<double>();
      };
      const double err_with = relative_error(with.logits, exact.logits),
                   err_without = relative_error(without.logits, exact.logits);
      const double mean_with = mean_error(with.logits), mean_without = mean_error(without.logits);
      std::printf("[kernels] %-28s %-24s: logits vs the float32 ATen step, largest (mean) error: with kernels "
                  "%.3e (%.3e), without %.3e (%.3e)\n",
                  ref_->name.c_str(), what.c_str(), err_with, mean_with, err_without, mean_without);
      std::fflush(stdout);
      if (dtype == torch::kFloat32) {
        EXPECT_LE(relative_error(with.logits, without.logits), 1e-5) << what << ": logits differ beyond rounding";
      } else {
        EXPECT_LE(mean_with, 1.25 * mean_without) << what << ": the kernels are less accurate than ATen on average";
        // And the largest error within the bf16 criterion of GpuBf16 (quartet against HF).
        EXPECT_LE(err_with, std::max(kBf16Tol, kBf16VsHF * err_without)) << what;
      }
    }
  }
  quartet::SamplingParams p;
  p.max_new_tokens = 24;
  p.span_bucket = 8;
  p.pad_id = fp32->config().pad_token_id.value_or(0);
  p.cuda_graphs = true;
  // Greedy, then sampling at T = 1 (PPO's: the one-kernel race on the same Exp(1) draws as ATen's);
  // then both with stop ids the first run emitted (so rows end, and the batch shrinks) and
  // min_new_tokens = 2 (so the earliest stops are masked): the one-kernel bookkeeping against ATen's.
  for (bool stops : {false, true}) {
    for (double temperature : {0.0, 1.0}) {
      p.temperature = temperature;
      p.seed = 7;
      p.stop_ids.clear();
      p.min_new_tokens = 0;
      if (stops) {
        auto first = quartet::generate(fp32, prompt, prompt_mask, p).tokens;
        p.stop_ids = {first[0][T + 1].item<int64_t>(), first[first.size(0) - 1][T + 3].item<int64_t>()};
        p.min_new_tokens = 2;
      }
      auto a = quartet::generate(fp32, prompt, prompt_mask, p);
      quartet::set_decode_kernels(false);
      auto b = quartet::generate(fp32, prompt, prompt_mask, p);
      quartet::set_decode_kernels(true);
      const std::string what = std::string(stops ? "with stops, " : "") + "temperature " + std::to_string(temperature);
      EXPECT_TRUE(torch::equal(a.tokens, b.tokens)) << "fp32 tokens, " << what << ", with the kernels:\n"
                                                    << a.tokens.slice(1, T) << "\nwithout:\n" << b.tokens.slice(1, T);
      EXPECT_TRUE(torch::equal(a.attention_mask, b.attention_mask)) << what;
      EXPECT_TRUE(torch::equal(a.new_lengths, b.new_lengths)) << what << ": " << a.new_lengths << b.new_lengths;
      if (stops) {
        EXPECT_GE(a.new_lengths.min().item<int64_t>(), 2) << what << ": min_new_tokens not kept";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuKernels,
                         ::testing::ValuesIn(torch::cuda::is_available() ? causal_names()
                                                                         : std::vector<std::string>{}),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuKernels);

// On a GPU: a training step's parameter gradients in bfloat16 (quartet's rotary and SwiGLU
// kernels, cuDNN attention taking grouped key/value heads itself where the model has them)
// against the same step in float32 on the same GPU (the float32 attention repeats the heads).
// Each gradient within 15% of its float32 value (relative L2 norm): bf16 rounding compounds to
// a few percent in these two-layer models, while a wrong sum over a head group or a wrong
// rotation is an error of order one.
class GpuTraining : public Parity {};

TEST_P(GpuTraining, Bf16GradientsFollowFloat32) {
  if (ref_->head != Head::causal_lm) GTEST_SKIP() << "not a causal LM";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto ids = ref_->get("input_ids").to(cuda), mask = ref_->get("attention_mask").to(cuda);
  const int64_t T = ids.size(1);
  auto grads_of = [&](torch::Dtype dtype) {
    auto model = quartet::load_model(ref_->dir, Head::causal_lm, dtype, cuda);
    model->eval();  // no dropout; gradients still flow
    auto logits = model->forward(ids, mask).to(torch::kFloat).narrow(1, 0, T - 1);
    auto logp = torch::log_softmax(logits, -1).gather(-1, ids.narrow(1, 1, T - 1).unsqueeze(-1)).squeeze(-1);
    // Next-token log-likelihood where both positions are real (no padded predictor or target).
    auto real = (mask.narrow(1, 0, T - 1) * mask.narrow(1, 1, T - 1)).to(torch::kFloat);
    (-(logp * real).sum() / real.sum()).backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& p : model->named_parameters())
      if (p.value().grad().defined()) grads[p.key()] = p.value().grad().to(torch::kCPU, torch::kFloat);
    return grads;
  };
  const auto exact = grads_of(torch::kFloat32), half = grads_of(torch::kBFloat16);
  ASSERT_FALSE(exact.empty());
  ASSERT_EQ(exact.size(), half.size());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, e] : exact) {
    auto it = half.find(name);
    ASSERT_NE(it, half.end()) << name;
    const double norm = e.norm().item<double>();
    if (norm == 0) continue;  // e.g. a bias no path reaches
    const double rel = (it->second - e).norm().item<double>() / norm;
    EXPECT_LE(rel, 0.15) << ref_->name << ": the bf16 gradient of " << name << " is off by " << rel;
    if (rel > worst) worst = rel, worst_name = name;
  }
  std::printf("[train bf16] %-34s largest gradient error %.3e (%s)\n", ref_->name.c_str(), worst, worst_name.c_str());
  std::fflush(stdout);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuTraining,
                         ::testing::ValuesIn(torch::cuda::is_available() ? causal_names()
                                                                         : std::vector<std::string>{}),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuTraining);

// ------------------------------------------------------------------------------------------
// Whole-set checks.
// ------------------------------------------------------------------------------------------

// config.json as transformers 4 wrote it (rope_theta / rope_scaling / rotary_pct /
// rotary_emb_base instead of rope_parameters): the same model must give the same outputs.
TEST(ConfigLayouts, TransformersV4ConfigGivesSameOutputs) {
  size_t checked = 0;
  for (const auto& name : reference_names()) {
    const std::string src = models_dir() + "/" + name;
    if (!exists(src + "/config_v4.json")) continue;
    SCOPED_TRACE(name);
    Reference ref(name);
    TempDir tmp(name + "_v4");
    copy_file(src + "/config_v4.json", tmp / "config.json");
    copy_file(src + "/model.safetensors", tmp / "model.safetensors");
    auto model = ref.load(tmp.str());
    const auto ids = ref.get("input_ids"), mask = ref.get("attention_mask");
    const auto out = forward(model, ids, mask);
    const auto expected = ref.get(output_key(ref.head));
    if (ref.head == Head::sequence_reward)
      EXPECT_TRUE(close(out, expected));
    else
      EXPECT_TRUE(close(real_positions(out, mask), real_positions(expected, mask)));
    ++checked;
  }
  EXPECT_GE(checked, kExpectedV4Configs);
}

// What save_model writes, HF reads: every saved directory loads with the Auto class of its
// head and reproduces the C++ outputs. Needs the project's Python (QUARTET_PYTHON).
TEST(HFInterop, SavedModelsLoadInTransformers) {
  const char* py = std::getenv("QUARTET_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "QUARTET_PYTHON is not set in the test environment: cannot run "
                    "transformers on the directories save_model wrote (the other checks ran)";
  const std::string script = source_root() + "/tests/parity/make_models.py";
  ASSERT_TRUE(exists(script)) << script;
  const auto names = reference_names();
  ASSERT_GE(names.size(), kExpectedModels);
  TempDir tmp("interop");
  std::ofstream list(tmp / "list.txt");
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    Reference ref(name);
    auto model = ref.load();
    const auto ids = ref.get("input_ids"), mask = ref.get("attention_mask");
    const auto out = forward(model, ids, mask);
    const std::string dir = tmp / name;
    quartet::save_model(model, dir);
    const std::string outputs = tmp / (name + ".cxx.safetensors");
    quartet::save_safetensors(outputs, {{"input_ids", ids.contiguous()},
                                                 {"attention_mask", mask.contiguous()},
                                                 {output_key(ref.head), out.contiguous()}});
    list << ref.meta.at("head") << ' ' << ref.meta.at("architecture") << ' ' << dir << ' '
         << outputs << '\n';
  }
  list.close();
  const std::string log = tmp / "check.log";
  const std::string cmd = "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 '" + std::string(py) + "' '" +
                          script + "' --check-saved '" + (tmp / "list.txt") + "' > '" + log +
                          "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream lf(log);
  std::stringstream text;
  text << lf.rdbuf();
  std::printf("%s", text.str().c_str());  // one line per model: the HF - C++ difference
  EXPECT_EQ(rc, 0) << cmd << "\n" << text.str();
  // One "ok" line per directory (so a script that checked nothing cannot pass).
  size_t oks = 0;
  for (std::string line; std::getline(text, line);) oks += line.rfind("ok ", 0) == 0;
  EXPECT_EQ(oks, names.size()) << text.str();
}

// ------------------------------------------------------------------------------------------
// Sliding-window attention (Mistral, Qwen2, Qwen3). The parity suites above run the sliding
// reference models (window 4, sequences up to 17 tokens: prefill, decoding past the window,
// scoring and training forms) like every other; these checks show that the window is what they
// test, and how the config keys are read.
// ------------------------------------------------------------------------------------------

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return nlohmann::json::parse(in);
}

// The sliding references' outputs without their window: the same up to the window's length in
// the longest (unpadded) sequence, different beyond it. Otherwise parity with HF would not
// show that the window is implemented.
TEST(SlidingWindow, TheWindowIsWhatTheReferencesTest) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  for (const std::string name : {"mistral_sliding_causal_lm", "qwen2_sliding_causal_lm", "qwen3_sliding_causal_lm"}) {
    SCOPED_TRACE(name);
    Reference ref(name);
    auto cfg = read_json(ref.dir + "/config.json");
    ASSERT_TRUE(cfg.contains("sliding_window") && cfg["sliding_window"].is_number_integer());
    const int64_t window = cfg["sliding_window"].get<int64_t>();
    cfg["sliding_window"] = nullptr;  // Mistral: no window
    if (cfg.contains("use_sliding_window")) {  // Qwen2, Qwen3: no window, every layer full
      cfg["use_sliding_window"] = false;
      cfg.erase("layer_types");
    }
    TempDir tmp(name + "_full");
    std::ofstream(tmp / "config.json") << cfg.dump(2);
    copy_file(ref.dir + "/model.safetensors", tmp / "model.safetensors");
    auto windowed = ref.load();
    auto full = ref.load(tmp.str());
    ASSERT_TRUE(std::find(full->config().sliding_layers.begin(), full->config().sliding_layers.end(), true) ==
                full->config().sliding_layers.end());
    const auto ids = ref.get("input_ids"), mask = ref.get("attention_mask");
    ASSERT_EQ(mask[0].sum().item<int64_t>(), ids.size(1)) << "sequence 0 is the unpadded one";
    const int64_t T = ids.size(1);
    ASSERT_GT(T, window);
    const auto a = forward(windowed, ids, mask)[0], b = forward(full, ids, mask)[0];
    const auto hf = ref.get("logits")[0];
    EXPECT_TRUE(close(a.slice(0, 0, window), b.slice(0, 0, window)))
        << "within the window the outputs must not depend on it";
    EXPECT_GT(relative_error(b.slice(0, window, T), hf.slice(0, window, T)), 100 * kRelTol)
        << "without its window the model still matches HF: the reference does not test the window";
    EXPECT_TRUE(close(a.slice(0, window, T), hf.slice(0, window, T)));
  }
}

// The same for Qwen3's q_norm and k_norm, and for llama3 rope scaling: the reference model
// without them (as a Llama without the norm tensors; with the default rope) is far from HF,
// so parity shows that they are implemented.
TEST(FamilyFeatures, TheNormsAndTheRopeScalingAreWhatTheReferencesTest) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> edit;
    bool drop_norms;
  };
  const std::vector<Case> cases = {
      {"qwen3_causal_lm", [](nlohmann::json& c) { c["model_type"] = "llama"; c["architectures"] = {"LlamaForCausalLM"}; },
       true},
      {"llama_rope_llama3_causal_lm", [](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}}; },
       false},
      {"llama_rope_llama3_long_causal_lm",
       [](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}}; }, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Reference ref(c.name);
    auto cfg = read_json(ref.dir + "/config.json");
    c.edit(cfg);
    TempDir tmp(c.name + "_without");
    std::ofstream(tmp / "config.json") << cfg.dump(2);
    quartet::SafetensorsFile f(ref.dir + "/model.safetensors");
    quartet::NamedTensors tensors;
    size_t dropped = 0;
    for (const auto& e : f.entries()) {
      const bool norm = e.name.find("q_norm") != std::string::npos || e.name.find("k_norm") != std::string::npos;
      if (c.drop_norms && norm) {
        ++dropped;
        continue;
      }
      tensors.emplace_back(e.name, f.get(e.name));
    }
    if (c.drop_norms) {
      EXPECT_EQ(dropped, 4u);  // two layers, q and k
    }
    quartet::save_safetensors(tmp / "model.safetensors", tensors);
    auto with = ref.load(), without = ref.load(tmp.str());
    const auto ids = ref.get("input_ids"), mask = ref.get("attention_mask");
    const auto hf = real_positions(ref.get("logits"), mask);
    EXPECT_TRUE(close(real_positions(forward(with, ids, mask), mask), hf));
    EXPECT_GT(relative_error(real_positions(forward(without, ids, mask), mask), hf), 100 * kRelTol);
  }
}

TEST(SlidingWindow, ConfigKeys) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  using quartet::ModelConfig;
  const auto qwen = read_json(models_dir() + "/qwen2_sliding_causal_lm/config.json");
  const auto mistral = read_json(models_dir() + "/mistral_sliding_causal_lm/config.json");
  auto parse = [](const nlohmann::json& j) { return ModelConfig::from_json_text(j.dump(), "c.json"); };
  using Layers = std::vector<bool>;

  // As HF wrote them.
  auto q = parse(qwen);
  EXPECT_EQ(q.sliding_window, 4);
  EXPECT_EQ(q.sliding_layers, (Layers{false, true}));
  auto m = parse(mistral);
  EXPECT_EQ(m.sliding_window, 4);
  EXPECT_EQ(m.sliding_layers, (Layers{true, true}));

  // Qwen2: layer_types wins over max_window_layers; without it, layers >= max_window_layers slide.
  auto j = qwen;
  j["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_EQ(parse(j).sliding_layers, (Layers{true, false}));
  j.erase("layer_types");
  j["max_window_layers"] = 0;
  EXPECT_EQ(parse(j).sliding_layers, (Layers{true, true}));
  j["max_window_layers"] = 2;
  EXPECT_EQ(parse(j).sliding_layers, (Layers{false, false}));
  j.erase("max_window_layers");  // Qwen2Config's default 28: no layer of two slides
  EXPECT_EQ(parse(j).sliding_layers, (Layers{false, false}));
  j = qwen;
  j["use_sliding_window"] = false;  // the window counts only with use_sliding_window
  j.erase("layer_types");
  EXPECT_EQ(parse(j).sliding_window, 0);
  EXPECT_EQ(parse(j).sliding_layers, (Layers{false, false}));
  j = qwen;
  j.erase("sliding_window");  // Qwen2Config's default window
  EXPECT_EQ(parse(j).sliding_window, 4096);

  // Mistral: 4096 when absent, none when null, every layer.
  j = mistral;
  j.erase("sliding_window");
  EXPECT_EQ(parse(j).sliding_window, 4096);
  EXPECT_EQ(parse(j).sliding_layers, (Layers{true, true}));
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).sliding_window, 0);
  EXPECT_EQ(parse(j).sliding_layers, (Layers{false, false}));

  // Refusals name the file and the key.
  j = qwen;
  j["use_sliding_window"] = false;  // sliding layers without a window: transformers raises too
  EXPECT_TRUE(throws_naming([&] { parse(j); }, {"c.json", "layer_types"}));
  j = qwen;
  j["layer_types"] = {"full_attention"};
  EXPECT_TRUE(throws_naming([&] { parse(j); }, {"c.json", "layer_types", "2"}));
  j["layer_types"] = {"full_attention", "chunked_attention"};
  EXPECT_TRUE(throws_naming([&] { parse(j); }, {"c.json", "layer_types[1]", "chunked_attention"}));
  j = mistral;
  j["sliding_window"] = 0;
  EXPECT_TRUE(throws_naming([&] { parse(j); }, {"c.json", "sliding_window"}));

  // to_json writes the window back: the same layers after a round trip, and HF's keys.
  j = qwen;
  j["layer_types"] = {"sliding_attention", "full_attention"};  // not what max_window_layers says
  const auto q_first = parse(j);
  for (const auto& c : {q, m, q_first}) {
    SCOPED_TRACE(c.model_type);
    const std::string text = c.to_json(quartet::architecture_name(c, Head::causal_lm), "float32");
    auto back = ModelConfig::from_json_text(text, "rt.json");
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    EXPECT_EQ(back.sliding_layers, c.sliding_layers);
    const auto out = nlohmann::json::parse(text);
    EXPECT_EQ(out["sliding_window"].get<int64_t>(), c.sliding_window);
    if (c.model_type == "qwen2") {
      EXPECT_TRUE(out["use_sliding_window"].get<bool>());
      EXPECT_EQ(out["layer_types"].size(), 2u);
    }
  }
}

// ------------------------------------------------------------------------------------------
// GPT-J-6B: the published config (inputs/models/gpt-j-6b/config.json) gives the model HF
// builds from it, tensor for tensor. Both sides are built on the meta device (no memory);
// make_models.py wrote HF's parameter shapes to gptj6b_parameters.json. The numerical check
// of the full-size model runs on a GPU: tests/gpu/gptj6b_matches_hf.py.
// ------------------------------------------------------------------------------------------

TEST(GptJ6B, PublishedConfigBuildsHFsModel) {
  const std::string path = source_root() + "/inputs/models/gpt-j-6b/config.json";
  const auto c = quartet::ModelConfig::from_json_file(path);
  EXPECT_EQ(c.family, quartet::Family::gptj);
  EXPECT_EQ(c.architecture, "GPTJForCausalLM");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.intermediate_size, 4 * 4096);  // n_inner null
  EXPECT_EQ(c.vocab_size, 50400);
  EXPECT_EQ(c.max_positions, 2048);
  EXPECT_EQ(c.activation, "gelu_new");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.parallel_residual);
  EXPECT_EQ(c.eos_token_id.value_or(-1), 50256);

  quartet::Transformer meta(c, Head::causal_lm, torch::TensorOptions().device(torch::kMeta),
                            /*random_init=*/false);
  std::map<std::string, std::vector<int64_t>> ours;
  int64_t total = 0;
  for (const auto& p : meta->named_parameters(true)) {
    EXPECT_TRUE(p.value().is_meta()) << p.key();
    ours[p.key()] = p.value().sizes().vec();
    total += p.value().numel();
  }

  const std::string hf_path = models_dir() + "/gptj6b_parameters.json";
  ASSERT_TRUE(exists(hf_path)) << hf_path << " is missing: make_models.py writes it";
  const auto hf = read_json(hf_path);
  EXPECT_EQ(hf["config"].get<std::string>().substr(hf["config"].get<std::string>().rfind("/inputs/")),
            "/inputs/models/gpt-j-6b/config.json");
  std::map<std::string, std::vector<int64_t>> theirs;
  for (const auto& [name, shape] : hf["shapes"].items()) theirs[name] = shape.get<std::vector<int64_t>>();
  EXPECT_EQ(ours.size(), theirs.size());
  for (const auto& [name, shape] : theirs) {
    auto it = ours.find(name);
    if (it == ours.end()) {
      ADD_FAILURE() << "HF's " << name << " is missing in quartet's model";
      continue;
    }
    EXPECT_EQ(it->second, shape) << name;
  }
  for (const auto& [name, shape] : ours)
    EXPECT_TRUE(theirs.count(name)) << "quartet's " << name << " is not in HF's model";
  EXPECT_EQ(total, hf["total"].get<int64_t>());
  std::printf("gpt-j-6b: %lld parameters (HF: %lld), %zu tensors\n", static_cast<long long>(total),
              static_cast<long long>(hf["total"].get<int64_t>()), ours.size());
  // "6B": a config typo (n_embd, n_layer) would move this by a lot; HF's count is the exact check.
  EXPECT_GT(total, 6.0e9);
  EXPECT_LT(total, 6.1e9);
}

// ------------------------------------------------------------------------------------------
// Broken checkpoints are refused, naming what is wrong.
// ------------------------------------------------------------------------------------------

// A copy of reference dir `name` whose weights are edited by `edit` (config.json unchanged).
struct EditedCopy {
  TempDir tmp;
  EditedCopy(const std::string& name, const std::function<void(quartet::NamedTensors&)>& edit)
      : tmp(name + "_edited") {
    const std::string src = models_dir() + "/" + name;
    copy_file(src + "/config.json", tmp / "config.json");
    quartet::SafetensorsFile f(src + "/model.safetensors");
    quartet::NamedTensors tensors;
    for (const auto& e : f.entries()) tensors.emplace_back(e.name, f.get(e.name));
    edit(tensors);
    quartet::save_safetensors(tmp / "model.safetensors", tensors);
  }
};

void drop(quartet::NamedTensors& ts, const std::string& name) {
  const auto n = ts.size();
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const auto& p) { return p.first == name; }),
           ts.end());
  ASSERT_EQ(ts.size(), n - 1) << "the reference checkpoint has no " << name;
}

TEST(LoadErrors, MissingTensorIsNamed) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  struct Case { std::string model, tensor; Head h; };
  const std::vector<Case> cases = {
      {"llama_causal_lm", "model.layers.1.mlp.up_proj.weight", Head::causal_lm},
      // untied: the output projection must not silently fall back to the embeddings
      {"llama_causal_lm", "lm_head.weight", Head::causal_lm},
      {"gpt2_causal_lm", "transformer.h.0.attn.c_attn.bias", Head::causal_lm},
      {"gpt_neox_token_value", "classifier.bias", Head::token_value},
      {"qwen2_sequence_reward", "score.weight", Head::sequence_reward}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.model + " without " + c.tensor);
    EditedCopy copy(c.model, [&](quartet::NamedTensors& ts) { drop(ts, c.tensor); });
    EXPECT_TRUE(throws_naming(
        [&] { quartet::load_model(copy.tmp.str(), c.h, torch::kFloat, torch::Device(torch::kCPU)); },
        {c.tensor}));
  }
}

TEST(LoadErrors, ShapeMismatchIsNamed) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  const std::string name = "model.layers.0.self_attn.k_proj.weight";  // [32, 64] with GQA
  EditedCopy copy("llama_causal_lm", [&](quartet::NamedTensors& ts) {
    bool found = false;
    for (auto& [n, t] : ts)
      if (n == name) {
        ASSERT_EQ(t.sizes(), (std::vector<int64_t>{32, 64}));
        t = torch::zeros({64, 64}, t.options());  // as if num_key_value_heads were ignored
        found = true;
      }
    ASSERT_TRUE(found);
  });
  EXPECT_TRUE(throws_naming(
      [&] {
        quartet::load_model(copy.tmp.str(), Head::causal_lm, torch::kFloat,
                            torch::Device(torch::kCPU));
      },
      {name}));
}

TEST(LoadErrors, UnsupportedModelTypeIsNamed) {
  ASSERT_GE(reference_names().size(), kExpectedModels);
  const std::string src = models_dir() + "/llama_causal_lm";
  TempDir tmp("bert");
  std::ifstream in(src + "/config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["model_type"] = "bert";
  cfg["architectures"] = {"BertModel"};
  std::ofstream(tmp / "config.json") << cfg.dump(2);
  copy_file(src + "/model.safetensors", tmp / "model.safetensors");
  EXPECT_TRUE(throws_naming(
      [&] {
        quartet::load_model(tmp.str(), Head::causal_lm, torch::kFloat, torch::Device(torch::kCPU));
      },
      {"bert"}));
  EXPECT_TRUE(throws_naming(
      [&] { quartet::ModelConfig::from_json_text(cfg.dump(), "config.json"); }, {"bert"}));
}

}  // namespace

}  // namespace test_model
