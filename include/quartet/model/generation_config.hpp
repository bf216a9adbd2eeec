#pragma once
// generation_config.json of a Hugging Face model directory, as transformers' GenerationConfig
// gives it to generate(): the ids generation stops at. Llama 3 and Qwen ship a list there (the
// chat turn's end token beside the text's), which config.json may not repeat.
#include <cstdint>
#include <string>
#include <vector>

namespace quartet {

// Its eos_token_id, an id or a list of ids (absent or null: none); no file: none. A malformed
// file or value is a quartet::Error naming the file and the key.
std::vector<int64_t> generation_stop_ids(const std::string& model_dir);

}  // namespace quartet
