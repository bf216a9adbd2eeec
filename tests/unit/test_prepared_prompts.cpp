// Prepared prompts files (docs/data.md): the header and its refusals by file and line, the rows'
// ids used as they are, the identity of a tokenizer and a chat template (SHA-256, the chat
// template found by transformers' rules) and the refusal of a file made for another actor.
// The end-to-end test against transformers is tests/data/check_prepared_prompts.py.
#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/sha256.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/io/prompts.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"
#include "quartet/model/tokenizer/chat_template.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "test_main.hpp"

using quartet::PromptDataset;
using quartet::PromptFileHeader;
using quartet::TokenizerIdentity;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_prepared_prompts {

namespace {

// A scratch directory, removed with its contents at the end (POSIX calls: see core/files.hpp).

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const quartet::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a quartet::Error";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

const std::string kShaA(64, 'a'), kShaB(64, 'b'), kShaC(64, 'c');

nlohmann::json header_json(const std::string& tok_sha = kShaA, bool applied = false, const std::string& tpl_sha = "") {
  nlohmann::json h = {{"quartet_prompts", 1},
                      {"tokenizer", {{"sha256", tok_sha}, {"source", "/m/tokenizer.json"}}},
                      {"chat_template", {{"applied", applied}}},
                      {"created", "2026-01-01T00:00:00Z"}};
  if (!tpl_sha.empty()) {
    h["chat_template"]["sha256"] = tpl_sha;
    h["chat_template"]["source"] = "/m/chat_template.jinja";
  }
  return h;
}

}  // namespace

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(quartet::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(quartet::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  quartet::test::ScratchDir dir{"quartet_prepared"};
  EXPECT_EQ(quartet::sha256_file_hex(dir.file("f", "abc")), quartet::sha256_hex("abc"));
  EXPECT_HAS(error_of([&] { quartet::sha256_file_hex(dir.path("missing")); }), dir.path("missing"));
}

// ---- the chat template, where transformers finds it ----------------------------------------------

TEST(ChatTemplate, FoundByTransformersRules) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  EXPECT_FALSE(quartet::find_chat_template(dir.path("")));  // nothing at all

  // tokenizer_config.json: a string, or the "default" of named templates.
  dir.file_in_subdirs("a/tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  auto t = quartet::find_chat_template(dir.path("a"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->text, "{{ messages }}");
  EXPECT_EQ(t->source, dir.path("a/tokenizer_config.json"));
  dir.file_in_subdirs("b/tokenizer_config.json",
           R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(quartet::find_chat_template(dir.path("b"))->text, "D");
  dir.file_in_subdirs("c/tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_FALSE(quartet::find_chat_template(dir.path("c")));
  dir.file_in_subdirs("d/tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_HAS(error_of([&] { quartet::find_chat_template(dir.path("d")); }), "tokenizer_config.json: chat_template");

  // chat_template.jinja wins over tokenizer_config.json, read with Python's universal newlines.
  dir.file_in_subdirs("a/chat_template.jinja", "line1\r\nline2\rline3\n");
  t = quartet::find_chat_template(dir.path("a"));
  EXPECT_EQ(t->text, "line1\nline2\nline3\n");
  EXPECT_EQ(t->source, dir.path("a/chat_template.jinja"));
  // chat_templates/default.jinja wins over both; other named .jinja files alone hide the config's.
  dir.file_in_subdirs("a/chat_templates/default.jinja", "named default");
  EXPECT_EQ(quartet::find_chat_template(dir.path("a"))->text, "named default");
  dir.file_in_subdirs("b/chat_templates/tool_use.jinja", "T");
  EXPECT_FALSE(quartet::find_chat_template(dir.path("b")));
}

// ---- the header ----------------------------------------------------------------------------------

TEST(PromptHeader, PlainFilesHaveNone) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  EXPECT_FALSE(quartet::read_prompt_header(dir.file("p.jsonl", "\n{\"prompt\": \"a\"}\n")));
  EXPECT_FALSE(quartet::read_prompt_header(dir.file("e.jsonl", "")));
}

TEST(PromptHeader, ReadsTheFields) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  const std::string p = dir.file("p.jsonl", "\n" + header_json(kShaA, true, kShaB).dump() + "\n");
  const auto h = quartet::read_prompt_header(p);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->where, p + ":2");
  EXPECT_EQ(h->tokenizer_sha256, kShaA);
  EXPECT_EQ(h->tokenizer_source, "/m/tokenizer.json");
  EXPECT_TRUE(h->chat_template_applied);
  EXPECT_EQ(h->chat_template_sha256, kShaB);
  EXPECT_EQ(h->chat_template_source, "/m/chat_template.jinja");
}

TEST(PromptHeader, MalformedHeadersAreRefusedByFileLineAndField) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  auto refusal = [&](nlohmann::json h, const std::string& part) {
    const std::string p = dir.file("h.jsonl", h.dump() + "\n");
    const std::string e = error_of([&] { quartet::read_prompt_header(p); });
    EXPECT_HAS(e, p + ":1: a malformed prepared-prompts header");
    EXPECT_HAS(e, part);
  };
  nlohmann::json h = header_json();
  h["quartet_prompts"] = 2;
  refusal(h, "version 2");
  h = header_json();
  h["quartet_prompts"] = "1";
  refusal(h, "\"quartet_prompts\" is string");
  h = header_json();
  h.erase("tokenizer");
  refusal(h, "no \"tokenizer\" object");
  h = header_json("ABC");
  refusal(h, "\"tokenizer.sha256\"");
  h = header_json();
  h["tokenizer"].erase("source");
  refusal(h, "\"tokenizer.source\"");
  h = header_json();
  h.erase("chat_template");
  refusal(h, "no \"chat_template\" object");
  h = header_json();
  h["chat_template"]["applied"] = "yes";
  refusal(h, "\"chat_template.applied\"");
  h = header_json(kShaA, true);  // applied, and no digest
  refusal(h, "\"chat_template.sha256\"");
}

// ---- the identity of the actor's tokenizer and template -------------------------------------------

TEST(PromptIdentity, SameTokenizerAndTemplateFit) {
  PromptFileHeader h;
  h.where = "p.jsonl:1";
  h.tokenizer_sha256 = kShaA;
  h.tokenizer_source = "/prep/tokenizer.json";
  TokenizerIdentity actor;
  actor.tokenizer_sha256 = kShaA;
  actor.tokenizer_source = "/actor/tokenizer.json";
  EXPECT_EQ(quartet::prompt_header_misfit(h, actor), "");
  // Raw prompts: the actor's template does not matter.
  actor.chat_template = quartet::ChatTemplate{"t", "/actor/chat_template.jinja"};
  actor.chat_template_sha256 = kShaC;
  EXPECT_EQ(quartet::prompt_header_misfit(h, actor), "");
  h.chat_template_applied = true;
  h.chat_template_sha256 = kShaC;
  h.chat_template_source = "/prep/tokenizer_config.json";
  EXPECT_EQ(quartet::prompt_header_misfit(h, actor), "");
}

TEST(PromptIdentity, AnotherTokenizerOrTemplateIsNamed) {
  PromptFileHeader h;
  h.where = "p.jsonl:1";
  h.tokenizer_sha256 = kShaA;
  h.tokenizer_source = "/prep/tokenizer.json";
  h.chat_template_applied = true;
  h.chat_template_sha256 = kShaB;
  h.chat_template_source = "/prep/chat_template.jinja";
  TokenizerIdentity actor;
  actor.tokenizer_sha256 = kShaC;
  actor.tokenizer_source = "/actor/tokenizer.json";
  std::string e = quartet::prompt_header_misfit(h, actor);
  EXPECT_HAS(e, "p.jsonl:1");
  EXPECT_HAS(e, "/prep/tokenizer.json (sha256 " + kShaA.substr(0, 16));
  EXPECT_HAS(e, "/actor/tokenizer.json (sha256 " + kShaC.substr(0, 16));

  actor.tokenizer_sha256 = kShaA;  // same tokenizer, no template
  e = quartet::prompt_header_misfit(h, actor);
  EXPECT_HAS(e, "/prep/chat_template.jinja");
  EXPECT_HAS(e, "has no chat template");

  actor.chat_template = quartet::ChatTemplate{"t", "/actor/tokenizer_config.json"};
  actor.chat_template_sha256 = kShaC;  // another template
  e = quartet::prompt_header_misfit(h, actor);
  EXPECT_HAS(e, "/prep/chat_template.jinja (sha256 " + kShaB.substr(0, 16));
  EXPECT_HAS(e, "/actor/tokenizer_config.json, is another (sha256 " + kShaC.substr(0, 16));
}

TEST(PromptIdentity, ModelDirectoryAndBuiltinTokenizer) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  // The built-in tokenizer's identity is the file `quartet tokenize random: --write-files` writes.
  quartet::make_directories(dir.path("builtin"));
  quartet::write_builtin_tokenizer_files(dir.path("builtin"), 1024);
  const TokenizerIdentity builtin = quartet::builtin_tokenizer_identity();
  const TokenizerIdentity written = quartet::model_dir_identity(dir.path("builtin"));
  EXPECT_EQ(builtin.tokenizer_sha256, written.tokenizer_sha256);
  EXPECT_EQ(written.tokenizer_source, dir.path("builtin/tokenizer.json"));
  EXPECT_FALSE(builtin.chat_template);
  EXPECT_FALSE(written.chat_template);

  dir.file_in_subdirs("m/tokenizer.json", "{}");
  dir.file_in_subdirs("m/chat_template.jinja", "{{ x }}");
  const TokenizerIdentity m = quartet::model_dir_identity(dir.path("m"));
  EXPECT_EQ(m.tokenizer_sha256, quartet::sha256_hex("{}"));
  ASSERT_TRUE(m.chat_template);
  EXPECT_EQ(m.chat_template_sha256, quartet::sha256_hex("{{ x }}"));
  EXPECT_HAS(error_of([&] { quartet::model_dir_identity(dir.path("none")); }), "no tokenizer.json");
}

// ---- the rows ------------------------------------------------------------------------------------

TEST(PreparedPrompts, IdsAreUsedAsTheyAreWithAnswersAndRecords) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  auto tok = quartet::make_builtin_tokenizer();
  // Ids that are not what the tokenizer makes of the text: they must come back unchanged.
  const std::string p = dir.file(
      "p.jsonl", header_json().dump() + "\n" +
                     R"({"prompt": "<|user|>hi", "prompt_ids": [5, 6, 7], "answer": "#### 72", )"
                     R"("messages": [{"role": "user", "content": "hi"}], "metadata": {"id": 7}})" "\n\n" +
                     R"({"prompt": "x", "prompt_ids": [9], "answer": null})" "\n");
  ASSERT_TRUE(quartet::prepared_prompts_header(p));
  PromptDataset ds(p, "ignored_field", tok.get(), 3);
  ASSERT_EQ(ds.size(), 2);
  const auto a = ds.get(0);
  EXPECT_EQ(a.ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(a.text, "<|user|>hi");
  EXPECT_EQ(a.answer, "#### 72");
  const auto record = nlohmann::json::parse(a.record);
  EXPECT_FALSE(record.contains("prompt_ids"));
  EXPECT_EQ(record["metadata"]["id"], 7);
  EXPECT_EQ(record["messages"][0]["content"], "hi");
  EXPECT_EQ(ds.get(1).ids, std::vector<int64_t>{9});
  EXPECT_EQ(ds.get(1).answer, "");

  // The io reader (quartet generate) gives the same rows, the header left out.
  const auto rows = quartet::read_prompts(p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[1].line, 4);
}

TEST(PreparedPrompts, BadRowsAreRefusedWhenReadByFileAndLine) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  auto tok = quartet::make_builtin_tokenizer();
  const std::string head = header_json().dump() + "\n" + R"({"prompt": "a", "prompt_ids": [1, 2]})" + "\n";
  auto refusal = [&](const std::string& row, const std::string& part, int64_t max_tokens = 8) {
    const std::string p = dir.file("bad.jsonl", head + row + "\n");
    const std::string e = error_of([&] { PromptDataset(p, "prompt", tok.get(), max_tokens); });
    EXPECT_HAS(e, p + ":3: ");
    EXPECT_HAS(e, part);
  };
  const int64_t vocab = tok->vocab_size();
  refusal(R"({"prompt": "a", "prompt_ids": [1, )" + std::to_string(vocab) + "]}",
          "prompt_ids[1] = " + std::to_string(vocab) + " is outside the actor tokenizer's vocabulary of " +
              std::to_string(vocab));
  refusal(R"({"prompt": "a", "prompt_ids": [1, 2, 3]})", "3 tokens, more than the 2 allowed", 2);
  refusal(R"({"prompt": "a"})", "no \"prompt_ids\" list");
  refusal(R"({"prompt": "a", "prompt_ids": []})", "\"prompt_ids\" is empty");
  refusal(R"({"prompt": "a", "prompt_ids": [1, -2]})", "\"prompt_ids\"[1] is -2, not a token id");
  refusal(R"({"prompt": "a", "prompt_ids": [1, 2.5]})", "\"prompt_ids\"[1] is 2.5");
  refusal(R"({"prompt_ids": [1]})", "expected a string \"prompt\"");
  refusal(R"({"prompt": "a", "prompt_ids": [1], "answer": 72})", "\"answer\" is number, not a string");
  refusal(R"(["prompt"])", "expected a JSON object, found array");
  refusal(header_json().dump(), "a second prepared-prompts header");
  refusal("{not json", "not JSON");

  const std::string only_header = dir.file("h.jsonl", header_json().dump() + "\n");
  EXPECT_HAS(error_of([&] { PromptDataset(only_header, "prompt", tok.get(), 8); }), "a header and no rows");
}

TEST(PreparedPrompts, Hdf5AndPlainFilesHaveNoHeader) {
  quartet::test::ScratchDir dir{"quartet_prepared"};
  const std::string h5 = dir.path("p.h5");
  quartet::write_tensors_h5(h5, {{"input_ids", torch::ones({1, 2}, torch::kLong)},
                                 {"lengths", torch::full({1}, 2, torch::kLong)}});
  EXPECT_FALSE(quartet::prepared_prompts_header(h5));
  EXPECT_FALSE(quartet::prepared_prompts_header(dir.file("p.jsonl", "{\"prompt\": \"a\"}\n")));
  EXPECT_HAS(error_of([&] { quartet::prepared_prompts_header(dir.path("none.jsonl")); }), "cannot read prompts file");
}

}  // namespace test_prepared_prompts
