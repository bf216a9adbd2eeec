#include "quartet/model/tokenizer/added_tokens.hpp"

#include <algorithm>
#include <utility>

#include "quartet/model/tokenizer/text_origin.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

const char* const kWordCharPattern = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";

void AddedTokenMatcher::add(std::string pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  auto& list = by_first_byte_[static_cast<unsigned char>(pattern[0])];
  list.push_back({std::move(pattern), token});
  std::stable_sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) {
    return a.pattern.size() > b.pattern.size();
  });
  empty_ = false;
}

const AddedTokenMatcher::Entry* AddedTokenMatcher::longest_at(std::string_view s, size_t pos) const {
  for (const Entry& e : by_first_byte_[static_cast<unsigned char>(s[pos])])
    if (s.compare(pos, e.pattern.size(), e.pattern) == 0) return &e;
  return nullptr;
}

void split_on_added(const std::string& s, size_t origin, const AddedTokenMatcher& m, const Regex* word_char,
                    std::vector<Piece>& out) {
  auto text_piece = [&](size_t b, size_t e) { out.push_back({s.substr(b, e - b), -1, origin_of_slice(origin, b, e)}); };
  if (m.empty()) {
    if (!s.empty()) text_piece(0, s.size());
    return;
  }
  auto word_before = [&](size_t pos) {
    if (pos == 0) return false;
    size_t b = pos - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    return word_char->matches_at(s, b);
  };
  size_t start_offset = 0;
  for (size_t pos = 0; pos < s.size();) {
    const AddedTokenMatcher::Entry* hit = m.longest_at(s, pos);
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->pattern.size();
    pos = stop;
    const AddedToken& t = *hit->token;
    if (t.single_word && (word_before(start) || (stop < s.size() && word_char->matches_at(s, stop))))
      continue;
    if (t.lstrip) {
      size_t b = start;
      while (b > start_offset) {
        size_t c = b - 1;
        while (c > 0 && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) --c;
        size_t k = c;
        if (!is_white_space(next_code_point(s, k))) break;
        b = c;
      }
      start = b;
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t k = stop;
        if (!is_white_space(next_code_point(s, k))) break;
        stop = k;
      }
      pos = stop;
    }
    if (start > start_offset) text_piece(start_offset, start);
    out.push_back({std::string(), t.id, 0});
    start_offset = stop;
  }
  if (start_offset < s.size()) text_piece(start_offset, s.size());
}

}  // namespace quartet
