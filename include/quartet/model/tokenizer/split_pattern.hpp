#pragma once
// The patterns of tokenizer.json (Split pre-tokenizers, Replace normalizers and decoders, \w for
// single-word added tokens) on PCRE2, and HF's ways of cutting a text at a pattern's matches.
// Patterns are written for Oniguruma in its Ruby syntax (HF's engine). Two differences matter:
// \s, which in Oniguruma includes U+0085 (NEL) and in PCRE2 does not, so \s and \S are widened
// when a pattern is compiled; and ^ and $, which in Ruby match at every line's start and end
// (after and before "\n"), so patterns are compiled multiline with "\n" as the only newline.
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
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
  // first, which is what makes PCRE2_NO_UTF_CHECK safe). As Oniguruma's find_iter (HF's engine)
  // gives them: an empty match right where the previous match ended is skipped.
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

// A range of a text and whether a pattern matched it.
struct MatchSpan {
  size_t begin, end;
  bool match;
};

// A pattern of tokenizer.json: {"Regex": ...} in Oniguruma's syntax or {"String": ...}, a
// literal (never empty).
struct TextPattern {
  std::shared_ptr<const Regex> regex;  // null for a literal
  std::string literal;
  // HF's Pattern::find_matches: the whole of `s` as contiguous spans, matches and the text
  // between them ([{0, 0, false}] for an empty s).
  std::vector<MatchSpan> find_matches(std::string_view s) const;
};

struct JsonFile;
// The pattern at `json_path` of the file; one that is neither form, an empty literal, or a regex
// that does not compile is refused there.
TextPattern read_pattern(const JsonFile& f, const nlohmann::json& p, const std::string& json_path);

// How HF's NormalizedString::split treats the matches.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The pieces that split leaves of the spans (their `match` now says: removed).
std::vector<MatchSpan> split_by_behavior(const std::vector<MatchSpan>& spans, SplitBehavior behavior);

}  // namespace quartet
