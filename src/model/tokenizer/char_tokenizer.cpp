#include "quartet/model/tokenizer/char_tokenizer.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

CharTokenizer::CharTokenizer(const std::string& alphabet, const std::vector<std::string>& specials) {
  QUARTET_CHECK(is_valid_utf8(alphabet), "char tokenizer: the alphabet is not valid UTF-8");
  for (const std::string& s : specials) {
    QUARTET_CHECK(!s.empty() && is_valid_utf8(s), "char tokenizer: special token '" + s +
                                                      "' is empty or not valid UTF-8");
    QUARTET_CHECK(!ids_.count(s), "char tokenizer: special token '" + s + "' is given twice");
    ids_[s] = static_cast<int64_t>(tokens_.size());
    tokens_.push_back(s);
    special_.push_back(true);
    // Recognised by their usual names so that generation knows where to start, stop and pad.
    if (s == "<pad>") pad_id = ids_[s];
    if (s == "<bos>" || s == "<s>" || s == "<|begin_of_text|>") bos_id = ids_[s];
    if (s == "<eos>" || s == "</s>" || s == "<|endoftext|>" || s == "<|end_of_text|>") eos_id = ids_[s];
  }
  specials_by_length_ = specials;
  std::stable_sort(specials_by_length_.begin(), specials_by_length_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (size_t i = 0; i < alphabet.size();) {
    const size_t n = utf8_length(static_cast<unsigned char>(alphabet[i]));
    std::string ch = alphabet.substr(i, n);
    i += n;
    QUARTET_CHECK(!ids_.count(ch), "char tokenizer: character " + describe_char(ch) +
                                       " appears twice in the alphabet or also as a special token");
    ids_[ch] = static_cast<int64_t>(tokens_.size());
    tokens_.push_back(std::move(ch));
    special_.push_back(false);
  }
}

std::vector<int64_t> CharTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  QUARTET_CHECK(is_valid_utf8(text), "char tokenizer: the text is not valid UTF-8");
  std::vector<int64_t> ids;
  if (add_special_tokens && bos_id) ids.push_back(*bos_id);
  for (size_t i = 0; i < text.size();) {
    auto sp = std::find_if(specials_by_length_.begin(), specials_by_length_.end(),
                           [&](const std::string& s) { return text.compare(i, s.size(), s) == 0; });
    if (sp != specials_by_length_.end()) {
      ids.push_back(ids_.at(*sp));
      i += sp->size();
      continue;
    }
    const size_t n = utf8_length(static_cast<unsigned char>(text[i]));
    auto it = ids_.find(text.substr(i, n));
    QUARTET_CHECK(it != ids_.end(), "char tokenizer: character " + describe_char(text.substr(i, n)) +
                                        " at byte " + std::to_string(i) + " is not in the alphabet");
    ids.push_back(it->second);
    i += n;
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string out;
  for (int64_t id : ids) {
    check_id(id);
    if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
    out += tokens_[static_cast<size_t>(id)];
  }
  return out;
}

std::optional<int64_t> CharTokenizer::token_to_id(const std::string& token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string CharTokenizer::id_to_token(int64_t id) const {
  check_id(id);
  return tokens_[static_cast<size_t>(id)];
}

void CharTokenizer::check_id(int64_t id) const {
  QUARTET_CHECK(id >= 0 && id < vocab_size(), "char tokenizer: token id " + std::to_string(id) +
                                                  " is not in the vocabulary (size " +
                                                  std::to_string(vocab_size()) + ")");
}

std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet,
                                               const std::vector<std::string>& specials) {
  return std::make_unique<CharTokenizer>(alphabet, specials);
}

}  // namespace quartet
