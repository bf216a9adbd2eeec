#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"

#include <nlohmann/json.hpp>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

namespace {

using ojson = nlohmann::ordered_json;

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return "[" + s + "]";
}

}  // namespace

std::string builtin_tokenizer_json() {
  const auto builtin = make_builtin_tokenizer();
  QUARTET_CHECK(builtin->bos_id && builtin->eos_id && builtin->pad_id,
                "the built-in tokenizer has no <bos>, <eos> or <pad>: its HF files cannot name them");
  const int64_t bos = *builtin->bos_id, eos = *builtin->eos_id, pad = *builtin->pad_id;
  const std::string bos_text = builtin->id_to_token(bos);

  // Every id in the model's vocabulary, specials included, so that the vocabulary alone is the
  // complete id map (as GPT-2's holds <|endoftext|>); the specials are also added tokens, which
  // is what makes both HF and quartet find them written out in a text, as the built-in does.
  ojson vocab = ojson::object(), added = ojson::array();
  for (int64_t id = 0; id < builtin->vocab_size(); ++id) {
    const std::string token = builtin->id_to_token(id);
    vocab[token] = id;
    if (id == bos || id == eos || id == pad)
      added.push_back({{"id", id}, {"content", token}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  const ojson bos_item = {{"SpecialToken", {{"id", bos_text}, {"type_id", 0}}}};
  ojson spec;
  spec["version"] = "1.0";
  spec["truncation"] = nullptr;
  spec["padding"] = nullptr;
  spec["added_tokens"] = added;
  spec["normalizer"] = nullptr;
  // No pre-tokenizer: a BPE without merges splits a text into its characters by itself.
  spec["pre_tokenizer"] = nullptr;
  // The built-in encode puts <bos> first when special tokens are asked for.
  spec["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens", {{bos_text, {{"id", bos_text}, {"ids", {bos}}, {"tokens", {bos_text}}}}}}};
  // ByteLevel joins tokens without a separator (no decoder at all would put spaces between
  // them). Printable ASCII other than the space maps to itself in the byte-level alphabet, and a
  // token that is not byte-level text (the space, the specials) is passed through as it is.
  spec["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  spec["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                   {"vocab", vocab}, {"merges", ojson::array()}};

  return spec.dump(2) + "\n";
}

void write_builtin_tokenizer_files(const std::string& dir, int64_t model_max_length) {
  const auto builtin = make_builtin_tokenizer();
  const std::string bos_text = builtin->id_to_token(*builtin->bos_id), eos_text = builtin->id_to_token(*builtin->eos_id),
                    pad_text = builtin->id_to_token(*builtin->pad_id);
  const std::string tokenizer_json = builtin_tokenizer_json();

  ojson config;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["bos_token"] = bos_text;
  config["eos_token"] = eos_text;
  config["pad_token"] = pad_text;
  // transformers' clean-up would turn "a ." into "a." on decode; the built-in never does.
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = model_max_length;
  config["model_input_names"] = {"input_ids", "attention_mask"};
  const ojson special_map = {{"bos_token", bos_text}, {"eos_token", eos_text}, {"pad_token", pad_text}};

  write_text_atomically(dir + "/tokenizer.json", tokenizer_json);
  write_text_atomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
  write_text_atomically(dir + "/special_tokens_map.json", special_map.dump(2) + "\n");

  // Read back with quartet's own loader (as `quartet generate` on the export will): the same
  // token for every id, the same specials, and the same ids for a text of every character.
  const auto loaded = load_model_tokenizer(dir);
  const std::string where = dir + "/tokenizer.json";
  QUARTET_CHECK(loaded->vocab_size() == builtin->vocab_size(),
                where + ": " + std::to_string(loaded->vocab_size()) + " tokens read back, the built-in tokenizer has " +
                    std::to_string(builtin->vocab_size()));
  for (int64_t id = 0; id < builtin->vocab_size(); ++id)
    QUARTET_CHECK(loaded->id_to_token(id) == builtin->id_to_token(id),
                  where + ": id " + std::to_string(id) + " reads back as '" + loaded->id_to_token(id) + "', the built-in has '" +
                      builtin->id_to_token(id) + "'");
  QUARTET_CHECK(loaded->bos_id == builtin->bos_id && loaded->eos_id == builtin->eos_id && loaded->pad_id == builtin->pad_id,
                where + ": bos/eos/pad read back differ from the built-in tokenizer's");
  const std::string probe = bos_text + kBuiltinAlphabet + "  " + eos_text + "a" + pad_text + "b";
  for (bool special : {true, false}) {
    const auto want = builtin->encode(probe, special), got = loaded->encode(probe, special);
    QUARTET_CHECK(want == got, where + ": encodes '" + probe + "' as " + ids_text(got) + ", the built-in tokenizer as " +
                                   ids_text(want));
    for (bool skip : {true, false})
      QUARTET_CHECK(loaded->decode(want, skip) == builtin->decode(want, skip),
                    where + ": decodes " + ids_text(want) + " as '" + loaded->decode(want, skip) +
                        "', the built-in tokenizer as '" + builtin->decode(want, skip) + "'");
  }
}

}  // namespace quartet
