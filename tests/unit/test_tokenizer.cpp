// Tokenizers against Hugging Face: tests/parity/make_tokenizers.py (a ctest fixture) trains small
// BPE tokenizers in the byte-level shapes (GPT-2, Llama-3, Qwen2) and the SentencePiece-style ones
// (Llama-2, Mistral, Gemma, with NFKC and corner cases) and records what transformers makes of a
// list of texts and of id lists; every id and every decoded string must match.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

using json = nlohmann::json;
using quartet::Tokenizer;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_tokenizer {

namespace {

const char* kStyles[] = {"gpt2",    "gpt2_prefix", "llama3", "qwen2",   "misc",    "llama2",
                         "llama2_legacy", "mistral", "gemma", "nfkc", "sp_misc", "sp_never"};

std::string parity_dir() {
  const char* d = std::getenv("QUARTET_PARITY_DIR");
  return d ? std::string(d) + "/tokenizers" : std::string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

std::vector<int64_t> ids_of(const json& j) { return j.get<std::vector<int64_t>>(); }

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// A scratch directory of this test process, removed at the end of each test that makes one.
// (POSIX calls, not std::filesystem: libtorch exports std::filesystem symbols of its own build,
// and the dynamic linker binds the test to those.)
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/quartet_tok_XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~ScratchDir() {
    for (const auto& f : files_) std::remove(f.c_str());
    if (!path_.empty()) rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    files_.push_back(p);
    return p;
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

// The message of the quartet::Error that `f` throws, or "" (and a test failure) when none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const quartet::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no quartet::Error was thrown";
  return {};
}

class TokenizerParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(parity_dir().empty()) << "QUARTET_PARITY_DIR is not set (run through ctest)";
    dir_ = parity_dir() + "/" + GetParam();
    ASSERT_TRUE(exists(dir_ + "/cases.json")) << dir_ << ": run tests/parity/make_tokenizers.py";
    meta_ = read_json(dir_ + "/cases.json");
    tok_ = quartet::load_hf_tokenizer(dir_ + "/tokenizer.json");
  }
  std::string dir_;
  json meta_;
  std::unique_ptr<Tokenizer> tok_;
};

// decode(ids) against what transformers gave: a string, or null where tokenizers itself fails
// (a Strip decoder with nothing left to strip), which must be a quartet::Error here.
void expect_decode(const Tokenizer& tok, const json& ids, bool skip, const json& expected) {
  if (expected.is_null()) {
    EXPECT_THROW(tok.decode(ids_of(ids), skip), quartet::Error) << ids.dump();
  } else {
    EXPECT_EQ(tok.decode(ids_of(ids), skip), expected.get<std::string>()) << ids.dump();
  }
}

TEST_P(TokenizerParity, IdsAndDecodedTextsMatchTransformers) {
  ASSERT_GT(meta_["cases"].size(), 30u);
  int checked = 0;
  for (const json& c : meta_["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE("text: \"" + text + "\"");
    const auto ids = tok_->encode(text, false);
    const auto ids_special = tok_->encode(text, true);
    EXPECT_EQ(ids, ids_of(c["ids"]));
    EXPECT_EQ(ids_special, ids_of(c["ids_with_special"]));
    expect_decode(*tok_, c["ids"], false, c["decoded"]);
    expect_decode(*tok_, c["ids_with_special"], false, c["decoded_with_special"]);
    expect_decode(*tok_, c["ids_with_special"], true, c["decoded_skip_special"]);
    // Lossless where HF is (normalizers, prefixes and unknown characters change texts).
    if (c["decoded"] == c["text"]) {
      EXPECT_EQ(tok_->decode(ids), text);
    }
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

TEST_P(TokenizerParity, DecodedIdListsMatchTransformers) {
  // Random ids from the whole vocabulary and texts cut after a few tokens: byte tokens that do
  // not form UTF-8, specials in the middle, prefixes where the decoders strip and drop.
  ASSERT_GT(meta_["decode_cases"].size(), 40u);
  for (const json& c : meta_["decode_cases"]) {
    expect_decode(*tok_, c["ids"], false, c["decoded"]);
    expect_decode(*tok_, c["ids"], true, c["decoded_skip_special"]);
  }
}

TEST_P(TokenizerParity, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), meta_["vocab_size"].get<int64_t>());
  for (auto& [token, id] : meta_["special_tokens"].items()) {
    EXPECT_EQ(tok_->token_to_id(token), std::optional<int64_t>(id.get<int64_t>())) << token;
    EXPECT_EQ(tok_->id_to_token(id.get<int64_t>()), token);
  }
  EXPECT_EQ(tok_->token_to_id("no such token, surely"), std::nullopt);

  auto model = quartet::load_model_tokenizer(dir_);
  auto expect_id = [&](const char* key, const std::optional<int64_t>& got) {
    if (meta_[key].is_null())
      EXPECT_EQ(got, std::nullopt) << key;
    else
      EXPECT_EQ(got, std::optional<int64_t>(meta_[key].get<int64_t>())) << key;
  };
  expect_id("bos_token_id", model->bos_id);
  expect_id("eos_token_id", model->eos_id);
  expect_id("pad_token_id", model->pad_id);
}

TEST_P(TokenizerParity, UnknownIdOnDecodeIsAnError) {
  const int64_t n = tok_->vocab_size();
  EXPECT_NE(error_of([&] { tok_->decode({0, n}); }).find("token id " + std::to_string(n)), std::string::npos);
  EXPECT_THROW(tok_->decode({-1}), quartet::Error);
  EXPECT_THROW(tok_->id_to_token(n + 5), quartet::Error);
}

TEST_P(TokenizerParity, InvalidUtf8IsReplacedNotFatal) {
  // Each maximal ill-formed subsequence reads as one U+FFFD (Python's errors="replace").
  EXPECT_EQ(tok_->encode("a\xff" "b", false), tok_->encode("a\xEF\xBF\xBD" "b", false));
  EXPECT_EQ(tok_->encode("x\xe4\xb8", false), tok_->encode("x\xEF\xBF\xBD", false));
  EXPECT_EQ(tok_->encode("\xed\xa0\x80z", false),  // a UTF-16 surrogate: three replacements
            tok_->encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz", false));
  EXPECT_EQ(tok_->encode("\xc0\x80", false), tok_->encode("\xEF\xBF\xBD\xEF\xBF\xBD", false));
}

TEST_P(TokenizerParity, LongInputsAndThreads) {
  // A long run of whitespace under the split patterns' lookahead must neither crash nor stall
  // (nor a whole text as one BPE word, where there is no pre-tokenizer).
  std::string text = "x" + std::string(200000, ' ');
  text += "x\n";
  text += std::string(50000, '\t');
  std::string digits;
  for (int i = 0; i < 20000; ++i) digits += static_cast<char>('0' + i % 10);
  const auto ids = tok_->encode(text, false), digit_ids = tok_->encode(digits, false);
  const std::string style = GetParam();
  if (style != "misc" && style != "sp_misc") {  // they remove digits and whitespace on purpose
    const std::string prefix = style == "gpt2_prefix" ? " " : "";
    EXPECT_TRUE(tok_->decode(ids) == prefix + text);  // not EXPECT_EQ: a failure would print 250 kB
    EXPECT_TRUE(tok_->decode(digit_ids) == prefix + digits);
  }

  // The word cache is shared; concurrent encodes must agree with a serial one.
  std::vector<std::string> texts;
  for (const json& c : meta_["cases"]) texts.push_back(c["text"]);
  std::vector<std::vector<int64_t>> serial;
  for (const auto& t : texts) serial.push_back(tok_->encode(t, true));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok_->encode(texts[(i + t) % texts.size()], true) != serial[(i + t) % texts.size()]) ++mismatches[t];
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

INSTANTIATE_TEST_SUITE_P(Styles, TokenizerParity, ::testing::ValuesIn(kStyles));

TEST(TokenizerParityDetails, LlamaTemplateGivesBos) {
  ASSERT_FALSE(parity_dir().empty()) << "QUARTET_PARITY_DIR is not set (run through ctest)";
  auto tok = quartet::load_hf_tokenizer(parity_dir() + "/llama3/tokenizer.json");
  ASSERT_TRUE(tok->bos_id.has_value());
  EXPECT_EQ(tok->id_to_token(*tok->bos_id), "<|begin_of_text|>");
  auto ids = tok->encode("hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *tok->bos_id);
  EXPECT_EQ(tok->encode("", true), std::vector<int64_t>{*tok->bos_id});
  // GPT-2 adds nothing.
  auto gpt2 = quartet::load_hf_tokenizer(parity_dir() + "/gpt2/tokenizer.json");
  EXPECT_EQ(gpt2->encode("hi", true), gpt2->encode("hi", false));
  EXPECT_FALSE(gpt2->bos_id.has_value());
}

TEST(TokenizerParityDetails, NfcComposes) {
  ASSERT_FALSE(parity_dir().empty()) << "QUARTET_PARITY_DIR is not set (run through ctest)";
  auto qwen = quartet::load_hf_tokenizer(parity_dir() + "/qwen2/tokenizer.json");
  EXPECT_EQ(qwen->decode(qwen->encode("caf\xC3\xA9 \xED\x95\x9C", false)), "caf\xC3\xA9 \xED\x95\x9C");
  EXPECT_EQ(qwen->encode("cafe\xCC\x81", false), qwen->encode("caf\xC3\xA9", false));
}

// Refusals: each names the file and the JSON path of what it refuses.
class TokenizerRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(parity_dir().empty()) << "QUARTET_PARITY_DIR is not set (run through ctest)";
    base_ = read_json(parity_dir() + "/llama3/tokenizer.json");
    ASSERT_FALSE(scratch_.path().empty());
  }
  std::string refusal(const json& spec) {
    const std::string path = scratch_.write("tokenizer.json", spec.dump());
    return error_of([&] { quartet::load_hf_tokenizer(path); });
  }
  ScratchDir scratch_;
  json base_;
};

TEST_F(TokenizerRefusals, UnsupportedModelType) {
  json spec = base_;
  spec["model"]["type"] = "Unigram";
  std::string msg = refusal(spec);
  EXPECT_NE(msg.find("tokenizer.json: model.type 'Unigram' is not supported (BPE only)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(scratch_.path()), std::string::npos) << msg;
}

TEST_F(TokenizerRefusals, UnsupportedPipelineParts) {
  // Each unsupported component, wherever it sits, is named by its JSON path.
  json spec = base_;
  spec["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Whitespace"}};
  std::string msg = refusal(spec);
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers[1].type 'Whitespace' is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("normalizer.normalizers[1].type 'Lowercase' is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("normalizer.type 'Precompiled' is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "WordPiece"}}}}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("decoder.decoders[1].type 'WordPiece' is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["post_processor"] = {{"type", "BertProcessing"}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("post_processor.type 'BertProcessing' is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["model"]["continuing_subword_prefix"] = "##";
  msg = refusal(spec);
  EXPECT_NE(msg.find("model.continuing_subword_prefix is not supported"), std::string::npos) << msg;

  spec = base_;
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  msg = refusal(spec);
  EXPECT_NE(msg.find("does not compile"), std::string::npos) << msg;
}

TEST_F(TokenizerRefusals, MalformedSentencePieceParts) {
  json spec = base_;
  spec["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "sometimes"}};
  std::string msg = refusal(spec);
  EXPECT_NE(msg.find("pre_tokenizer.prepend_scheme 'sometimes' is not always, first or never"), std::string::npos) << msg;

  spec["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "__"}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("pre_tokenizer.replacement '__' is not one character"), std::string::npos) << msg;

  // tokenizers refuses add_prefix_space false unless the prepend scheme is never.
  spec["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", false}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("pre_tokenizer.add_prefix_space false does not match prepend_scheme"), std::string::npos) << msg;
  spec["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_NO_THROW(quartet::load_hf_tokenizer(scratch_.write("tokenizer.json", spec.dump())));

  spec = base_;
  spec["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("decoder.start is not a non-negative integer"), std::string::npos) << msg;

  spec = base_;
  spec["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("normalizer.pattern.String is empty"), std::string::npos) << msg;

  spec["normalizer"] = {{"type", "Prepend"}};
  msg = refusal(spec);
  EXPECT_NE(msg.find("normalizer.prepend is missing"), std::string::npos) << msg;
}

TEST_F(TokenizerRefusals, BrokenContents) {
  json spec = base_;
  spec["model"]["merges"][3] = "nospace";
  std::string msg = refusal(spec);
  EXPECT_NE(msg.find("model.merges[3]"), std::string::npos) << msg;

  spec = base_;
  spec["model"]["merges"][0] = json::array({"not-a-token-1", "not-a-token-2"});
  msg = refusal(spec);
  EXPECT_NE(msg.find("model.merges[0]"), std::string::npos) << msg;

  spec = base_;
  spec["model"].erase("vocab");
  msg = refusal(spec);
  EXPECT_NE(msg.find("model.vocab is missing"), std::string::npos) << msg;

  spec = base_;
  spec["added_tokens"][0]["id"] = "zero";
  msg = refusal(spec);
  EXPECT_NE(msg.find("added_tokens[0].id"), std::string::npos) << msg;
}

TEST_F(TokenizerRefusals, MalformedJsonNamesTheFile) {
  const std::string path = scratch_.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  std::string msg = error_of([&] { quartet::load_hf_tokenizer(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;

  msg = error_of([&] { quartet::load_hf_tokenizer(scratch_.path() + "/absent.json"); });
  EXPECT_NE(msg.find("absent.json"), std::string::npos) << msg;
  msg = error_of([&] { quartet::load_model_tokenizer(scratch_.path() + "/no_model_here"); });
  EXPECT_NE(msg.find("no tokenizer.json"), std::string::npos) << msg;
}

TEST_F(TokenizerRefusals, ModelDirectoryConfigs) {
  scratch_.write("tokenizer.json", base_.dump());
  // {"content": ...} form, and a config.json that fills in only what is missing.
  scratch_.write("tokenizer_config.json",
                 R"({"bos_token": {"content": "<|begin_of_text|>", "lstrip": false}, "eos_token": null})");
  scratch_.write("config.json", R"({"eos_token_id": [5, 1], "pad_token_id": 1, "bos_token_id": 3})");
  auto tok = quartet::load_model_tokenizer(scratch_.path());
  EXPECT_EQ(tok->bos_id, std::optional<int64_t>(0));
  EXPECT_EQ(tok->eos_id, std::optional<int64_t>(5));
  EXPECT_EQ(tok->pad_id, std::optional<int64_t>(1));

  scratch_.write("tokenizer_config.json", R"({"pad_token": "<no such token>"})");
  std::string msg = error_of([&] { quartet::load_model_tokenizer(scratch_.path()); });
  EXPECT_NE(msg.find("tokenizer_config.json: pad_token '<no such token>'"), std::string::npos) << msg;
}

TEST(CharTokenizer, RoundTripAndSpecials) {
  auto tok = quartet::make_char_tokenizer("0123456789 +=äß中😀", {"<pad>", "<bos>", "<eos>"});
  EXPECT_EQ(tok->vocab_size(), 3 + 17);
  EXPECT_EQ(tok->pad_id, std::optional<int64_t>(0));
  EXPECT_EQ(tok->bos_id, std::optional<int64_t>(1));
  EXPECT_EQ(tok->eos_id, std::optional<int64_t>(2));
  EXPECT_EQ(tok->token_to_id("0"), std::optional<int64_t>(3));
  EXPECT_EQ(tok->token_to_id("😀"), std::optional<int64_t>(19));
  EXPECT_EQ(tok->id_to_token(18), "中");

  const std::string text = "12 + 3 = 15 äß中😀";
  auto ids = tok->encode(text, false);
  EXPECT_EQ(ids.size(), 16u);
  EXPECT_EQ(tok->decode(ids), text);
  auto with_bos = tok->encode(text, true);
  ASSERT_EQ(with_bos.size(), ids.size() + 1);
  EXPECT_EQ(with_bos.front(), 1);
  EXPECT_EQ(tok->decode(with_bos), "<bos>" + text);
  EXPECT_EQ(tok->decode(with_bos, true), text);
  // Specials written in the text are tokens of their own.
  EXPECT_EQ(tok->encode("1<eos><pad>", false), (std::vector<int64_t>{4, 2, 0}));
  EXPECT_TRUE(tok->encode("", false).empty());
}

TEST(CharTokenizer, Errors) {
  auto tok = quartet::make_char_tokenizer("0123456789", {"<pad>"});
  std::string msg = error_of([&] { tok->encode("12x3", false); });
  EXPECT_NE(msg.find("'x' (U+0078) at byte 2 is not in the alphabet"), std::string::npos) << msg;
  msg = error_of([&] { tok->encode("1\xC3\xA9", false); });
  EXPECT_NE(msg.find("U+00E9"), std::string::npos) << msg;
  EXPECT_THROW(tok->encode("1\xff", false), quartet::Error);
  EXPECT_THROW(tok->decode({11}), quartet::Error);
  EXPECT_THROW(tok->decode({-1}), quartet::Error);
  EXPECT_THROW(quartet::make_char_tokenizer("abca", {}), quartet::Error);
  EXPECT_THROW(quartet::make_char_tokenizer("ab", {"<s>", "<s>"}), quartet::Error);
  EXPECT_THROW(quartet::make_char_tokenizer("ab", {"a"}), quartet::Error);
}

}  // namespace

}  // namespace test_tokenizer
