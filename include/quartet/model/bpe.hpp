#pragma once
// The byte-pair-encoding model of a Hugging Face tokenizer: a vocabulary and ranked merges that
// turn one pre-token (a "word", already byte-level mapped when the tokenizer is byte-level) into
// token ids. The tokenizer pipeline around it (added tokens, normalizer, pre-tokenizer, post-
// processor) is in hf_tokenizer.hpp.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace quartet {

class BpeModel {
 public:
  // `merges` in rank order (first = applied first). `where` prefixes every error (the file).
  // A merge whose parts or result are missing from the vocabulary is refused, as HF does.
  BpeModel(std::unordered_map<std::string, int64_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           std::optional<std::string> unk_token, bool fuse_unk, const std::string& where);

  // Appends the ids of `word` to `out`. Characters missing from the vocabulary become the unknown
  // token when there is one and are dropped otherwise (HF's behaviour; a byte-level vocabulary
  // has all 256 byte characters, so nothing is dropped there).
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

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  bool ignore_merges_;
  std::optional<int64_t> unk_id_;
  bool fuse_unk_;

  // Prompts repeat the same words over and over; the merge loop is the expensive part.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace quartet
