#pragma once
// Reading a Hugging Face tokenizer.json into the parts of its pipeline (hf_tokenizer.hpp runs
// them). What is supported, and what is refused by name, is listed at load_hf_tokenizer
// (tokenizer.hpp); every refusal is a quartet::Error naming the file and the JSON path.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quartet/model/added_tokens.hpp"
#include "quartet/model/bpe.hpp"
#include "quartet/model/pre_tokenizer.hpp"

namespace quartet {

struct TokenizerJson {
  std::string path;
  std::unique_ptr<BpeModel> bpe;
  std::vector<AddedToken> added;  // in the file's order, each id once
  bool nfc = false;               // the normalizer is NFC (or a Sequence of NFC)
  std::vector<PreTokenizerStep> pre_steps;
  // Post-processor for one sequence: the ids before and after it (TemplateProcessing).
  std::vector<int64_t> template_before, template_after;
  // The one special token the template puts before the text, when there is one.
  std::optional<int64_t> bos_id;
  bool byte_level_decoder = false;
};

TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace quartet
