#pragma once
// The byte-pair-encoding model of a Hugging Face tokenizer: a vocabulary and ranked merges that
// turn one pre-token (a "word", already byte-level mapped when the tokenizer is byte-level) into
// token ids; a character missing from the vocabulary becomes its bytes' "<0xNN>" tokens
// (byte_fallback, SentencePiece style) or the unknown token. The tokenizer pipeline around it (added tokens, normalizer, pre-tokenizer, post-
// processor) is in hf_tokenizer.hpp.
#include <cstdint>
#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace quartet {

class BpeModel {
 public:
  struct Options {
    bool ignore_merges = false;  // a word that is a token is taken whole (Llama-3)
    std::optional<std::string> unk_token;
    bool fuse_unk = false;       // a run of unknown characters is one unknown token
    bool byte_fallback = false;  // an unknown character is its bytes' <0xNN> tokens when all exist
  };
  // `merges` in rank order (first = applied first). `where` prefixes every error (the file).
  // A merge whose parts or result are missing from the vocabulary is refused, as HF does.
  BpeModel(std::unordered_map<std::string, int64_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, Options options,
           const std::string& where);

  // Appends the ids of `word` to `out`. A character missing from the vocabulary becomes its
  // bytes' tokens with byte_fallback (when the vocabulary has all of them), else the unknown
  // token when there is one, else nothing (HF's behaviour; a byte-level vocabulary has all 256
  // byte characters, so nothing is dropped there). As in HF, an unknown token waits until the
  // next known character, so byte tokens that come between go before it.
  void encode_word(const std::string& word, std::vector<int64_t>& out) const;

  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }

 private:
  struct MergeTarget {
    int32_t rank;
    int64_t new_id;
  };
  static uint64_t pair_key(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::vector<int64_t> merge_word(const std::string& word) const;
  std::vector<int64_t> initial_symbols(const std::string& word) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  Options options_;
  std::optional<int64_t> unk_id_;
  std::array<int64_t, 256> byte_ids_;  // "<0xNN>" of each byte, -1 where absent

  // Prompts repeat the same words over and over; the merge loop is the expensive part.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace quartet
