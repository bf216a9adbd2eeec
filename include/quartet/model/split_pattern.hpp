#pragma once
// The regexes of tokenizer.json (pre-tokenizer split patterns, \w for single-word added
// tokens) on PCRE2. Patterns are written for Oniguruma (HF's engine); the one difference that
// matters for the GPT-2/Llama-3/Qwen2 patterns is \s, which in Oniguruma includes U+0085 (NEL)
// and in PCRE2 does not, so \s and \S are widened when a pattern is compiled.
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace quartet {

// The pattern HF's ByteLevel pre-tokenizer splits with (use_regex): GPT-2's.
extern const char* const kGpt2Pattern;

// An Oniguruma pattern in PCRE2's syntax (\s and \S widened by U+0085).
std::string onig_to_pcre2(const std::string& pattern);

// A compiled pattern (UTF, Unicode properties, JIT where available). Safe to use from several
// threads: every match has its own match data.
class Regex {
 public:
  // A pattern that does not compile is a quartet::Error naming `where` and PCRE2's reason.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) in `s`, which must be valid UTF-8 (callers sanitize
  // first, which is what makes PCRE2_NO_UTF_CHECK safe).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  // Whether the pattern matches starting exactly at `pos`.
  bool matches_at(std::string_view s, size_t pos) const;

  // Whether the pattern matches the whole of `s` (anchored at both ends).
  bool matches_whole(std::string_view s) const;

  // The match starting exactly at `pos`, as [begin, end) of group 0 (the whole match) and of
  // each capture group (npos, npos where a group took no part); empty when there is none.
  std::vector<std::pair<size_t, size_t>> groups_at(std::string_view s, size_t pos) const;

 private:
  struct MatchData;
  bool match(std::string_view s, size_t pos, uint32_t options, MatchData& md) const;

  pcre2_code* code_ = nullptr;
};

}  // namespace quartet
