#include "quartet/model/tokenizer/split_pattern.hpp"

#include <algorithm>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::MatchData {
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    QUARTET_CHECK(md != nullptr, "PCRE2: out of memory for match data");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* get() const { return md; }
  pcre2_match_data* md;
};

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = onig_to_pcre2(pattern);
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  QUARTET_CHECK(context != nullptr, "PCRE2: out of memory for a compile context");
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &offset, context);
  pcre2_compile_context_free(context);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(__FILE__, __LINE__,
         where + ": regex /" + pattern + "/ does not compile (PCRE2, at offset " + std::to_string(offset) +
             "): " + reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: without it (not built in, or no executable memory) the
  // interpreter gives the same matches.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchData md(code_);
  for (size_t pos = 0; pos <= s.size();) {
    if (!match(s, pos, 0, md)) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (b == e && !out.empty() && out.back().second == e) {  // step over one character
      if (pos >= s.size()) break;
      pos += utf8_length(static_cast<unsigned char>(s[pos]));
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  return out;
}

bool Regex::matches_at(std::string_view s, size_t pos) const {
  MatchData md(code_);
  return match(s, pos, PCRE2_ANCHORED, md);
}

bool Regex::matches_whole(std::string_view s) const {
  MatchData md(code_);
  return match(s, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md);
}

std::vector<std::pair<size_t, size_t>> Regex::groups_at(std::string_view s, size_t pos) const {
  MatchData md(code_);
  std::vector<std::pair<size_t, size_t>> out;
  if (!match(s, pos, PCRE2_ANCHORED, md)) return out;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  const uint32_t pairs = pcre2_get_ovector_count(md.get());
  uint32_t groups = 0;
  pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &groups);
  for (uint32_t g = 0; g <= groups && g < pairs; ++g) {
    if (ov[2 * g] == PCRE2_UNSET) out.emplace_back(std::string_view::npos, std::string_view::npos);
    else out.emplace_back(ov[2 * g], ov[2 * g + 1]);
  }
  return out;
}

bool Regex::match(std::string_view s, size_t pos, uint32_t options, MatchData& md) const {
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  int rc = pcre2_match(code_, subject, s.size(), pos, options | PCRE2_NO_UTF_CHECK, md.get(), nullptr);
  // The JIT's fixed stack can run out on a long run of whitespace under a lookahead; the
  // interpreter keeps its backtracking on the heap and gets through.
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code_, subject, s.size(), pos, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     md.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    fail(__FILE__, __LINE__,
         std::string("PCRE2 match failed on a text of ") + std::to_string(s.size()) +
             " bytes: " + reinterpret_cast<const char*>(msg));
  }
  return true;
}

std::vector<MatchSpan> TextPattern::find_matches(std::string_view s) const {
  if (s.empty()) return {{0, 0, false}};
  std::vector<MatchSpan> spans;
  size_t prev = 0;
  auto add_match = [&](size_t b, size_t e) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  };
  if (regex) {
    for (auto [b, e] : regex->find_all(s)) add_match(b, e);
  } else {
    for (size_t at = s.find(literal); at != std::string_view::npos; at = s.find(literal, prev))
      add_match(at, at + literal.size());
  }
  if (prev < s.size()) spans.push_back({prev, s.size(), false});
  return spans;
}

TextPattern read_pattern(const JsonFile& f, const nlohmann::json& p, const std::string& json_path) {
  TextPattern out;
  if (p.is_object() && p.size() == 1 && p.contains("Regex")) {
    const std::string jp = json_path + ".Regex";
    out.regex = std::make_shared<const Regex>(f.string_at(p["Regex"], jp), f.path + ": " + jp);
  } else if (p.is_object() && p.size() == 1 && p.contains("String")) {
    out.literal = f.string_at(p["String"], json_path + ".String");
    if (out.literal.empty()) f.refuse_at(json_path + ".String", "is empty");
  } else {
    f.refuse_at(json_path, "is neither {\"Regex\": ...} nor {\"String\": ...}");
  }
  return out;
}

std::vector<MatchSpan> split_by_behavior(const std::vector<MatchSpan>& spans, SplitBehavior behavior) {
  std::vector<MatchSpan> parts;
  bool previous = false;  // whether the span before was a match
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const MatchSpan& sp : spans) parts.push_back({sp.begin, sp.end, false});
      break;
    case SplitBehavior::Removed:
      parts = spans;
      break;
    case SplitBehavior::Contiguous:
      for (const MatchSpan& sp : spans) {
        if (sp.match == previous && !parts.empty()) parts.back().end = sp.end;
        else parts.push_back({sp.begin, sp.end, false});
        previous = sp.match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const MatchSpan& sp : spans) {
        if (sp.match && !previous && !parts.empty()) parts.back().end = sp.end;
        else parts.push_back({sp.begin, sp.end, false});
        previous = sp.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous && !parts.empty()) parts.back().begin = it->begin;
        else parts.push_back({it->begin, it->end, false});
        previous = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  return parts;
}

}  // namespace quartet
