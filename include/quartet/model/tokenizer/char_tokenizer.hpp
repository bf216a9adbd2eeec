#pragma once
// A character vocabulary for the built-in demo tasks: one token per UTF-8 character of an
// alphabet, after the special tokens (make_char_tokenizer in tokenizer.hpp says which ids).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

class CharTokenizer final : public Tokenizer {
 public:
  CharTokenizer(const std::string& alphabet, const std::vector<std::string>& specials);

  // Special tokens written out in the text are recognised (longest first, as HF does); every other
  // character must be in the alphabet. With add_special_tokens, the BOS token goes first.
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;

 private:
  void check_id(int64_t id) const;

  std::vector<std::string> tokens_;
  std::vector<bool> special_;
  std::vector<std::string> specials_by_length_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace quartet
