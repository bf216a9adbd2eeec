#include "quartet/model/hf_tokenizer.hpp"

#include <algorithm>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/byte_level.hpp"
#include "quartet/model/nfc.hpp"
#include "quartet/model/utf8.hpp"

namespace quartet {

HfTokenizer::HfTokenizer(TokenizerJson spec)
    : path_(std::move(spec.path)),
      bpe_(std::move(spec.bpe)),
      added_(std::move(spec.added)),
      nfc_(spec.nfc),
      pre_steps_(std::move(spec.pre_steps)),
      template_before_(std::move(spec.template_before)),
      template_after_(std::move(spec.template_after)),
      byte_level_decoder_(spec.byte_level_decoder) {
  bos_id = spec.bos_id;
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_id_[added_[i].id] = i;
    added_by_content_[added_[i].content] = added_[i].id;
  }
  build_matchers();
  build_id_table();
}

void HfTokenizer::build_matchers() {
  for (const AddedToken& t : added_) {
    // A normalized added token is looked for in normalized text, so in its normalized form.
    AddedTokenMatcher& m = (t.normalized && nfc_) ? normalized_matcher_ : raw_matcher_;
    m.add((t.normalized && nfc_) ? nfc(t.content, path_ + ": added token") : t.content, &t);
  }
  if (std::any_of(added_.begin(), added_.end(), [](const AddedToken& t) { return t.single_word; }))
    word_char_ = std::make_shared<const Regex>("\\w", path_);
}

void HfTokenizer::build_id_table() {
  int64_t size = 0;
  for (const auto& [token, id] : bpe_->vocab()) size = std::max(size, id + 1);
  for (const AddedToken& t : added_) size = std::max(size, t.id + 1);
  id_to_token_.assign(static_cast<size_t>(size), std::string());
  id_known_.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : bpe_->vocab()) {
    id_to_token_[id] = token;
    id_known_[id] = true;
  }
  for (const AddedToken& t : added_) {
    id_to_token_[t.id] = t.content;
    id_known_[t.id] = true;
  }
}

std::vector<int64_t> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const std::string clean = sanitize_utf8(text);
  std::vector<Piece> first, pieces;
  split_on_added(clean, raw_matcher_, word_char_.get(), first);
  for (Piece& p : first) {
    if (p.id >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    split_on_added(nfc_ ? nfc(p.text, path_) : p.text, normalized_matcher_, word_char_.get(), pieces);
  }
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = template_before_;
  ids.reserve(clean.size() / 2 + ids.size() + template_after_.size());
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    for (const std::string& word : pre_tokenize(pre_steps_, p.text)) bpe_->encode_word(word, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

void HfTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size() || !id_known_[static_cast<size_t>(id)])
    fail(__FILE__, __LINE__,
         path_ + ": token id " + std::to_string(id) + " is not in the vocabulary (size " +
             std::to_string(vocab_size()) + ")");
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int64_t id : ids) {
    check_id(id);
    auto a = added_by_id_.find(id);
    if (a != added_by_id_.end() && skip_special_tokens && added_[a->second].special) continue;
    const std::string& token = id_to_token_[static_cast<size_t>(id)];
    if (byte_level_decoder_) {
      byte_level_decode_token(token, bytes);
    } else {  // HF without a decoder joins the tokens with spaces
      if (!first) bytes += ' ';
      bytes += token;
    }
    first = false;
  }
  return sanitize_utf8(bytes);
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
