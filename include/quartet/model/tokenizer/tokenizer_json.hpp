#pragma once
// Reading a Hugging Face tokenizer.json into the parts of its pipeline (hf_tokenizer.hpp runs
// them). What is supported, and what is refused by name, is listed at load_hf_tokenizer
// (tokenizer.hpp); every refusal is a quartet::Error naming the file and the JSON path.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/added_tokens.hpp"
#include "quartet/model/tokenizer/bpe.hpp"
#include "quartet/model/tokenizer/decoders.hpp"
#include "quartet/model/tokenizer/normalizers.hpp"
#include "quartet/model/tokenizer/pre_tokenizer.hpp"
#include "quartet/model/tokenizer/template_processing.hpp"

namespace quartet {

struct TokenizerJson {
  std::string path;
  std::unique_ptr<BpeModel> bpe;
  std::vector<AddedToken> added;  // in the file's order, each id once
  Normalizer normalizer;
  std::vector<PreTokenizerStep> pre_steps;
  PostProcessor post;
  // The one special token the template puts before the text, when there is one.
  std::optional<int64_t> bos_id;
  Decoder decoder;
};

TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace quartet
