#pragma once
// The Hugging Face tokenizer pipeline, as read from tokenizer.json (tokenizer_json.hpp): added
// tokens, normalizer, pre-tokenizer, BPE, post-processor, and the decoder on the way back.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "quartet/model/tokenizer/added_tokens.hpp"
#include "quartet/model/tokenizer/bpe.hpp"
#include "quartet/model/tokenizer/decoders.hpp"
#include "quartet/model/tokenizer/normalizers.hpp"
#include "quartet/model/tokenizer/pre_tokenizer.hpp"
#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/template_processing.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/model/tokenizer/tokenizer_json.hpp"

namespace quartet {

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(TokenizerJson spec);
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;

 private:
  void build_matchers();
  void build_id_table();
  void check_id(int64_t id) const;

  std::string path_;
  std::unique_ptr<BpeModel> bpe_;
  std::vector<AddedToken> added_;  // the matchers point into it
  std::unordered_map<std::string, int64_t> added_by_content_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  Normalizer normalizer_;
  std::vector<PreTokenizerStep> pre_steps_;
  std::shared_ptr<const Regex> word_char_;  // for added tokens with single_word
  PostProcessor post_;
  Decoder decoder_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
  // What decode gives the decoder for each id: the token, or for an added token with
  // normalized=true its normalized form (tokenizers >= 0.23, so that a decoder undoes what the
  // normalizer did).
  std::vector<std::string> decode_token_;
  // HF skips a token on decode by that text: any id whose text is a special added token's.
  std::vector<bool> id_special_;
};

}  // namespace quartet
