#pragma once
// Tokenizers without Python: Hugging Face tokenizer.json with a byte-level BPE model (GPT-2,
// Llama-3 and Qwen style: a pre-tokenizer split pattern, merges, added and special tokens),
// and a small character vocabulary for the built-in demo tasks.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace quartet {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`; with add_special_tokens, what the tokenizer's post-processor adds
  // (a BOS token for Llama-3, nothing for GPT-2).
  virtual std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  std::optional<int64_t> bos_id, eos_id, pad_id;
};

// Reads a Hugging Face tokenizer.json; an unsupported model, pre-tokenizer or normalizer is
// refused by name (quartet::Error naming the file and the JSON path).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);
// The tokenizer of a model directory (its tokenizer.json; bos/eos/pad from
// tokenizer_config.json or config.json when the tokenizer file does not say).
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir);

// One token per character of `alphabet` (UTF-8 characters), after the special tokens
// (e.g. {"<pad>", "<bos>", "<eos>"}), which take ids 0, 1, 2, ... in that order.
std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet,
                                               const std::vector<std::string>& specials);

}  // namespace quartet
