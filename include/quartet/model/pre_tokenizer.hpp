#pragma once
// The pre-tokenizer of a Hugging Face tokenizer: the steps that cut normalized text into the
// words BPE encodes one by one (ByteLevel with or without GPT-2's pattern, Split on a regex or
// a literal with any of HF's behaviors).
#include <memory>
#include <string>
#include <vector>

#include "quartet/model/split_pattern.hpp"

namespace quartet {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind;
  std::shared_ptr<const Regex> regex;  // Split with a Regex pattern, ByteLevel with use_regex
  std::string literal;                 // Split with a String pattern
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

// The words of `s` after every step in order (each step splits every piece the one before left).
std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& s);

}  // namespace quartet
