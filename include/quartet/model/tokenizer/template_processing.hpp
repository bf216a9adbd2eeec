#pragma once
// The post-processor of a Hugging Face tokenizer: what encode(text, add_special_tokens=true)
// puts around the tokens of one text. TemplateProcessing's `single` template (special tokens
// before and after $A, from its special_tokens map) is the one that adds anything; ByteLevel
// only trims offsets, which quartet does not report. transformers applies the file's
// post-processor as it is when a tokenizer.json exists (it ignores tokenizer_config.json's
// add_bos_token / add_eos_token then), so quartet does too.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/json_file.hpp"

namespace quartet {

struct PostProcessor {
  std::vector<int64_t> before, after;  // ids around the text's own
};

// The post-processor at `json_path` (null: none; ByteLevel, TemplateProcessing or a Sequence of
// them, at most one TemplateProcessing); anything else is refused there.
PostProcessor read_post_processor(const JsonFile& f, const nlohmann::json& p, const std::string& json_path);

}  // namespace quartet
