#pragma once
// The normalizer of a Hugging Face tokenizer: what it does to each stretch of text between
// added tokens before the pre-tokenizer cuts it (Prepend, Replace, NFC, NFKC, in sequence).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/unicode_normalization.hpp"

namespace quartet {

struct NormalizerStep {
  enum class Kind { Prepend, Replace, Unicode } kind;
  std::string content;  // Prepend: what goes first; Replace: what replaces each match
  TextPattern pattern;  // Replace
  UnicodeForm form = UnicodeForm::NFC;
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }

  // Every step on `text` in order; `origin` (text_origin.hpp) follows the text.
  void normalize(std::string& text, size_t& origin) const;
  std::string normalize(std::string text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// The normalizer at `json_path` (null: none); a type other than Prepend, Replace, NFC, NFKC or a
// Sequence of them is refused there.
Normalizer read_normalizer(const JsonFile& f, const nlohmann::json& n, const std::string& json_path);

}  // namespace quartet
