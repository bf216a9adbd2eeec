#pragma once
// The added tokens of a Hugging Face tokenizer (special tokens, chat markers, ...): found in the
// text before anything else runs, as HF's AddedVocabulary does, and passed through as ids. Those
// with normalized=false are looked for in the raw text; those with normalized=true afterwards,
// in the normalized text of what is left between them, in their own normalized form.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "quartet/model/tokenizer/split_pattern.hpp"

namespace quartet {

struct AddedToken {
  int64_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Added tokens are found leftmost-longest, as HF's Aho-Corasick automaton does; they are few and
// each starts with a distinctive byte, so a per-first-byte list beats building an automaton.
class AddedTokenMatcher {
 public:
  // `token` must outlive the matcher; an empty pattern is ignored.
  void add(std::string pattern, const AddedToken* token);
  bool empty() const { return empty_; }

  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  // The longest pattern that starts at s[pos], or null.
  const Entry* longest_at(std::string_view s, size_t pos) const;

 private:
  std::array<std::vector<Entry>, 256> by_first_byte_;
  bool empty_ = true;
};

// A stretch of text still to tokenize, or an added token already found.
struct Piece {
  std::string text;   // when id < 0
  int64_t id = -1;    // an added token
  size_t origin = 0;  // of the text (text_origin.hpp)
};

// Rust's regex \w, which decides single_word: Unicode's word characters (UTS #18).
extern const char* const kWordCharPattern;

// Appends `s` (whose origin is `origin`) to `out` as text pieces and the added tokens `m` finds
// in it: HF's AddedVocabulary::find_matches, including its quirks (a match rejected by
// single_word is skipped whole, and lstrip never reaches back into what the previous match
// took). word_char (kWordCharPattern) is needed only when a token has single_word.
void split_on_added(const std::string& s, size_t origin, const AddedTokenMatcher& m, const Regex* word_char,
                    std::vector<Piece>& out);

}  // namespace quartet
