#include "quartet/model/tokenizer/hf_tokenizer.hpp"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

HfTokenizer::HfTokenizer(TokenizerJson spec)
    : path_(std::move(spec.path)),
      bpe_(std::move(spec.bpe)),
      added_(std::move(spec.added)),
      normalizer_(std::move(spec.normalizer)),
      pre_steps_(std::move(spec.pre_steps)),
      post_(std::move(spec.post)),
      decoder_(std::move(spec.decoder)) {
  bos_id = spec.bos_id;
  for (const AddedToken& t : added_) added_by_content_[t.content] = t.id;
  build_matchers();
  build_id_table();
}

void HfTokenizer::build_matchers() {
  for (const AddedToken& t : added_) {
    if (t.normalized) normalized_matcher_.add(normalizer_.normalize(t.content), &t);
    else raw_matcher_.add(t.content, &t);
  }
  if (std::any_of(added_.begin(), added_.end(), [](const AddedToken& t) { return t.single_word; }))
    word_char_ = std::make_shared<const Regex>(kWordCharPattern, path_);
}

void HfTokenizer::build_id_table() {
  int64_t size = 0;
  std::string largest;  // the token of the largest id
  auto see = [&](const std::string& token, int64_t id) {
    if (id + 1 > size) size = id + 1, largest = token;
  };
  for (const auto& [token, id] : bpe_->vocab()) see(token, id);
  for (const AddedToken& t : added_) see(t.content, t.id);
  // Ids run 0..N-1 in every tokenizer a model is trained with (the embedding has a row per id),
  // and the tables here are dense: an id far past the count of tokens is a damaged file, refused
  // before it costs its size in memory.
  const int64_t count = static_cast<int64_t>(bpe_->vocab().size() + added_.size());
  QUARTET_CHECK(size <= 4 * count + 65536,
                path_ + ": token '" + largest + "' has id " + std::to_string(size - 1) + ", far past the " +
                    std::to_string(count) + " tokens of the file (ids run from 0 to about the number of tokens)");
  id_to_token_.assign(static_cast<size_t>(size), std::string());
  id_known_.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : bpe_->vocab()) {
    id_to_token_[id] = token;
    id_known_[id] = true;
  }
  decode_token_ = id_to_token_;
  std::unordered_set<std::string> special;
  for (const AddedToken& t : added_) {
    id_to_token_[t.id] = t.content;
    decode_token_[t.id] = t.normalized ? normalizer_.normalize(t.content) : t.content;
    id_known_[t.id] = true;
    if (t.special) special.insert(t.content);
  }
  id_special_.assign(static_cast<size_t>(size), false);
  for (size_t id = 0; id < decode_token_.size(); ++id) id_special_[id] = id_known_[id] && special.count(decode_token_[id]) > 0;
}

std::vector<int64_t> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const std::string clean = sanitize_utf8(text);
  // HF's AddedVocabulary::extract_and_normalize: tokens that are not normalized are found in the
  // raw text, then each stretch between them is normalized on its own and searched for the
  // normalized ones.
  std::vector<Piece> raw, pieces;
  split_on_added(clean, clean.empty() ? 0 : utf8_length(static_cast<unsigned char>(clean[0])), raw_matcher_,
                 word_char_.get(), raw);
  for (Piece& p : raw) {
    if (p.id >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    normalizer_.normalize(p.text, p.origin);
    split_on_added(p.text, p.origin, normalized_matcher_, word_char_.get(), pieces);
  }
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = post_.before;
  ids.reserve(clean.size() / 2 + ids.size() + post_.after.size());
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    for (const std::string& word : pre_tokenize(pre_steps_, p.text, p.origin)) bpe_->encode_word(word, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.after.begin(), post_.after.end());
  return ids;
}

void HfTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size() || !id_known_[static_cast<size_t>(id)])
    fail(__FILE__, __LINE__,
         path_ + ": token id " + std::to_string(id) + " is not in the vocabulary (size " +
             std::to_string(vocab_size()) + ")");
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    check_id(id);
    if (skip_special_tokens && id_special_[static_cast<size_t>(id)]) continue;
    tokens.push_back(decode_token_[static_cast<size_t>(id)]);
  }
  return sanitize_utf8(decoder_.decode(std::move(tokens), path_));
}

std::optional<int64_t> HfTokenizer::token_to_id(const std::string& token) const {
  auto a = added_by_content_.find(token);
  if (a != added_by_content_.end()) return a->second;
  auto v = bpe_->vocab().find(token);
  if (v != bpe_->vocab().end()) return v->second;
  return std::nullopt;
}

std::string HfTokenizer::id_to_token(int64_t id) const {
  check_id(id);
  return id_to_token_[static_cast<size_t>(id)];
}

}  // namespace quartet
