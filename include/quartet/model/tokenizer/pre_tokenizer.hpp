#pragma once
// The pre-tokenizer of a Hugging Face tokenizer: the steps that cut normalized text into the
// words BPE encodes one by one (ByteLevel with or without GPT-2's pattern, Split on a regex or
// a literal with any of HF's behaviors, Metaspace).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/metaspace.hpp"
#include "quartet/model/tokenizer/split_pattern.hpp"

namespace quartet {

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind;
  TextPattern pattern;                 // Split
  std::shared_ptr<const Regex> regex;  // ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  Metaspace metaspace;
};

// The words of `s` after every step in order (each step splits every piece the one before
// left). `origin` is what text_origin.hpp says of `s`.
std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& s, size_t origin);

// The pre-tokenizer at `json_path` (null: none; ByteLevel, Split, Metaspace or a Sequence of
// them); anything else is refused there.
std::vector<PreTokenizerStep> read_pre_tokenizer(const JsonFile& f, const nlohmann::json& p, const std::string& json_path);

}  // namespace quartet
