#include "quartet/rl/rewards/math_answer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/utf8.hpp"
#include "quartet/rl/rewards/answer_text.hpp"

namespace quartet {

namespace {

constexpr size_t npos = std::string::npos;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool starts_with_at(const std::string& s, size_t at, const char* prefix) {
  return s.compare(at, std::strlen(prefix), prefix) == 0;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// Removes the LaTeX command `name` wherever it is not the start of a longer command name
// ("\left" but not "\leftarrow").
void remove_command(std::string& s, const std::string& name) {
  for (size_t at = s.find(name); at != npos; at = s.find(name, at)) {
    if (at + name.size() < s.size() && is_letter(s[at + name.size()])) {
      at += name.size();
      continue;
    }
    s.erase(at, name.size());
  }
}

// The index of the '}' closing the '{' at `open`; npos when it is not closed.
size_t closing_brace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    else if (s[i] == '}' && --depth == 0) return i;
  }
  return npos;
}

// The argument of the last \boxed / \fbox in s: its brace group, or ("\boxed 5") the token
// after it; nullopt when there is none or its group is not closed (a cut-off completion).
std::optional<std::string> last_boxed(const std::string& s) {
  size_t at = npos, length = 0;
  for (const char* command : {"\\boxed", "\\fbox"}) {
    const size_t p = s.rfind(command);
    if (p != npos && (at == npos || p > at)) {
      at = p;
      length = std::strlen(command);
    }
  }
  if (at == npos) return std::nullopt;
  size_t i = at + length;
  while (i < s.size() && s[i] == ' ') ++i;
  if (i < s.size() && s[i] == '{') {
    const size_t close = closing_brace(s, i);
    if (close == npos) return std::nullopt;
    return s.substr(i + 1, close - i - 1);
  }
  size_t end = i;
  while (end < s.size() && !is_space_char(s[end]) && s[end] != '$') ++end;
  if (end == i) return std::nullopt;
  return s.substr(i, end - i);
}

// \boxed{X} and \fbox{X} replaced by X everywhere.
std::string unwrap_boxes(std::string s) {
  for (const char* command : {"\\boxed", "\\fbox"}) {
    for (size_t at = s.find(command); at != npos; at = s.find(command, at)) {
      const size_t open = at + std::strlen(command);
      const size_t close = open < s.size() && s[open] == '{' ? closing_brace(s, open) : npos;
      if (close == npos) {
        s.erase(at, open - at);
        continue;
      }
      s = s.substr(0, at) + s.substr(open + 1, close - open - 1) + s.substr(close + 1);
    }
  }
  return s;
}

// Whether only a unit's exponent, spaces, periods and closing delimiters follow `from`.
bool only_trailing_after(const std::string& s, size_t from) {
  std::string rest = s.substr(from);
  for (const char* exponent : {"^{2}", "^{3}", "^2", "^3"}) replace_all(rest, exponent, "");
  return std::all_of(rest.begin(), rest.end(), [](char c) { return is_space_char(c) || c == '.' || c == '}'; });
}

// \text{...} and its kin: a trailing one after the value is a unit and goes (with its exponent,
// "\text{ cm}^2"); any other is replaced by its text ("\text{Evelyn}", "12\text{ and }13").
std::string strip_text_groups(std::string s) {
  static const char* const kUnits[] = {"\\text", "\\textrm", "\\mbox", "\\mathrm", "\\textup"};
  static const char* const kStyles[] = {"\\textbf", "\\textit", "\\mathbf", "\\mathit", "\\emph"};
  for (const char* const* group : {kUnits, kStyles}) {
    const bool unit = group == kUnits;
    for (int k = 0; k < 5; ++k) {
      const std::string command = group[k];
      for (size_t at = s.find(command + "{"); at != npos; at = s.find(command + "{", at)) {
        const size_t open = at + command.size();
        const size_t close = closing_brace(s, open);
        if (close == npos) break;
        const std::string inner = s.substr(open + 1, close - open - 1);
        const bool drop = unit && !trim_space(s.substr(0, at)).empty() && only_trailing_after(s, close + 1);
        if (drop) {
          s.erase(at, close + 1 - at);
          for (const char* exponent : {"^{2}", "^{3}", "^2", "^3"})
            if (starts_with_at(s, at, exponent)) s.erase(at, std::strlen(exponent));
        } else {
          s = s.substr(0, at) + inner + s.substr(close + 1);
        }
      }
    }
  }
  return s;
}

// \frac12 -> \frac{1}{2}, \frac1{2}, \frac{1}2; \sqrt2 -> \sqrt{2}.
std::string brace_single_digit_arguments(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    int arguments = starts_with_at(s, i, "\\frac") ? 2 : starts_with_at(s, i, "\\sqrt") ? 1 : 0;
    if (arguments == 0) {
      out += s[i++];
      continue;
    }
    out += s.substr(i, 5);
    i += 5;
    for (; arguments > 0 && i < s.size(); --arguments) {
      if (s[i] == '{') {
        const size_t close = closing_brace(s, i);
        if (close == npos) break;
        out += s.substr(i, close - i + 1);
        i = close + 1;
      } else if (is_digit(s[i]) || is_letter(s[i])) {
        out += std::string("{") + s[i++] + "}";
      } else {
        break;
      }
    }
  }
  return out;
}

// Thousands separators: "1,000,000" -> "1000000" (a comma between a digit and exactly three).
std::string drop_thousands_commas(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool separator = s[i] == ',' && i > 0 && is_digit(s[i - 1]) && i + 3 < s.size() && is_digit(s[i + 1]) &&
                           is_digit(s[i + 2]) && is_digit(s[i + 3]) && (i + 4 == s.size() || !is_digit(s[i + 4]));
    if (!separator) out += s[i];
  }
  return out;
}

// Positions of the top-level occurrences of `c` (outside (), [], {}).
std::vector<size_t> top_level(const std::string& s, char c) {
  std::vector<size_t> at;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(' || s[i] == '[' || s[i] == '{') ++depth;
    else if (s[i] == ')' || s[i] == ']' || s[i] == '}') --depth;
    else if (s[i] == c && depth == 0) at.push_back(i);
  }
  return at;
}

// Whether s is one bracket group from its first character to its last.
bool enclosed(const std::string& s, char open, char close) {
  if (s.size() < 2 || s.front() != open || s.back() != close) return false;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == open) ++depth;
    else if (s[i] == close && --depth == 0 && i + 1 < s.size()) return false;
  }
  return true;
}

// Brackets nest at most this deep in an answer that is read as a value or a tuple: reading
// recurses once a level, and a completion of ten thousand braces must not exhaust the stack.
constexpr int kMaxNesting = 32;

int nesting_depth(const std::string& s) {
  int depth = 0, deepest = 0;
  for (char c : s) {
    if (c == '(' || c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if (c == ')' || c == ']' || c == '}') --depth;
  }
  return deepest;
}

// ---- values ---------------------------------------------------------------------------------

std::optional<double> parse_signed(const std::string& s, size_t& i);

// The inside of the brace or parenthesis group at s[i] as a whole value.
std::optional<double> parse_group(const std::string& s, size_t& i, char open, char close) {
  if (i >= s.size() || s[i] != open) return std::nullopt;
  int depth = 0;
  size_t end = npos;
  for (size_t k = i; k < s.size(); ++k) {
    if (s[k] == open) ++depth;
    else if (s[k] == close && --depth == 0) {
      end = k;
      break;
    }
  }
  if (end == npos) return std::nullopt;
  const std::string inner = s.substr(i + 1, end - i - 1);
  size_t j = 0;
  std::optional<double> v = parse_signed(inner, j);
  if (!v || j != inner.size()) return std::nullopt;
  i = end + 1;
  return v;
}

// Digits with an optional decimal point: "12", "12.5", ".5".
std::optional<double> parse_decimal(const std::string& s, size_t& i) {
  size_t j = i;
  while (j < s.size() && is_digit(s[j])) ++j;
  const size_t whole = j - i;
  size_t fraction = 0;
  if (j < s.size() && s[j] == '.' && j + 1 < s.size() && is_digit(s[j + 1])) {
    ++j;
    while (j < s.size() && is_digit(s[j])) ++j, ++fraction;
  }
  if (whole == 0 && fraction == 0) return std::nullopt;
  const double v = std::stod(s.substr(i, j - i));
  i = j;
  return v;
}

std::optional<double> parse_frac(const std::string& s, size_t& i) {
  if (!starts_with_at(s, i, "\\frac")) return std::nullopt;
  size_t j = i + 5;
  const std::optional<double> a = parse_group(s, j, '{', '}');
  if (!a) return std::nullopt;
  const std::optional<double> b = parse_group(s, j, '{', '}');
  if (!b || *b == 0) return std::nullopt;
  i = j;
  return *a / *b;
}

std::optional<double> parse_unsigned(const std::string& s, size_t& i) {
  if (i >= s.size()) return std::nullopt;
  if (s[i] == '\\') return parse_frac(s, i);
  if (s[i] == '{') return parse_group(s, i, '{', '}');
  if (s[i] == '(') return parse_group(s, i, '(', ')');
  std::optional<double> d = parse_decimal(s, i);
  if (!d) return std::nullopt;
  if (i < s.size() && s[i] == '/') {
    size_t j = i + 1;
    const std::optional<double> e = parse_decimal(s, j);
    if (!e || *e == 0) return std::nullopt;
    i = j;
    return *d / *e;
  }
  if (starts_with_at(s, i, "\\frac") && *d == std::floor(*d)) {  // a mixed number: 1\frac{1}{2}
    size_t j = i;
    const std::optional<double> f = parse_frac(s, j);
    if (!f || *f < 0) return std::nullopt;
    i = j;
    return *d + *f;
  }
  return d;
}

std::optional<double> parse_signed(const std::string& s, size_t& i) {
  double sign = 1;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    sign = s[i] == '-' ? -1 : 1;
    ++i;
  }
  std::optional<double> v = parse_unsigned(s, i);
  if (!v) return std::nullopt;
  return sign * *v;
}

bool values_close(double a, double b, double tolerance) {
  return std::fabs(a - b) <= tolerance * std::max({1.0, std::fabs(a), std::fabs(b)});
}

bool normalized_equal(const std::string& a, const std::string& b, double tolerance);

// (1,\frac{1}{2}) against (1,0.5): the same brackets, the same count, equal elements.
bool lists_equal(const std::string& a, const std::string& b, double tolerance) {
  if (a.size() < 2 || b.size() < 2) return false;
  const std::string brackets = "([";
  if (brackets.find(a.front()) == npos || a.front() != b.front() || a.back() != b.back()) return false;
  const std::string ia = a.substr(1, a.size() - 2), ib = b.substr(1, b.size() - 2);
  const std::vector<size_t> ca = top_level(ia, ','), cb = top_level(ib, ',');
  if (ca.empty() || ca.size() != cb.size()) return false;
  size_t from_a = 0, from_b = 0;
  for (size_t k = 0; k <= ca.size(); ++k) {
    const size_t to_a = k < ca.size() ? ca[k] : ia.size(), to_b = k < cb.size() ? cb[k] : ib.size();
    if (!normalized_equal(ia.substr(from_a, to_a - from_a), ib.substr(from_b, to_b - from_b), tolerance)) return false;
    from_a = to_a + 1;
    from_b = to_b + 1;
  }
  return true;
}

bool normalized_equal(const std::string& a, const std::string& b, double tolerance) {
  const std::optional<double> va = math_answer_value(a), vb = math_answer_value(b);
  if (va && vb) return values_close(*va, *vb, tolerance);
  if (va || vb) return false;
  return a == b || lists_equal(a, b, tolerance);
}

// ---- extraction -------------------------------------------------------------------------------

// Numbers as they are written in prose and LaTeX: -3, 1,000, 14{,}916, 2.5, .5, 3/4, \frac{3}{4},
// \dfrac12; not the 2 of "x2" or "AZ2B".
const Regex& number_pattern() {
  static const Regex pattern(
      R"(-?\\[dtc]?frac(?:\{-?\d+(?:\.\d+)?\}\{-?\d+(?:\.\d+)?\}|\d\d))"
      R"(|(?<![\w.)}])-?(?:\d{1,3}(?:(?:,|\{,\})\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+(?!\.\d))?)"
      R"(|(?<![\w.)}])-?\.\d+)",
      "the math reward's number pattern");
  return pattern;
}

std::optional<std::string> nth_number(const std::string& text, bool last) {
  const std::string clean = sanitize_utf8(text);
  const auto spans = number_pattern().find_all(clean);
  if (spans.empty()) return std::nullopt;
  const auto& [begin, end] = last ? spans.back() : spans.front();
  return clean.substr(begin, end - begin);
}

// Trailing words and punctuation off a stated answer: "18 dollars." -> "18".
std::string without_trailing_words(std::string s) {
  for (;;) {
    s = trim_space(s);
    while (!s.empty() && (s.back() == '.' || s.back() == ',' || s.back() == ';' || s.back() == '!')) s.pop_back();
    s = trim_space(s);
    size_t k = s.size();
    while (k > 0 && is_letter(s[k - 1])) --k;
    if (k == s.size() || k == 0 || !is_space_char(s[k - 1])) return s;
    s.erase(k);
  }
}

// A stated answer that is prose gives its first number.
std::string reduce_prose(const std::string& stated) {
  const std::string trimmed = without_trailing_words(stated);
  const std::string n = normalize_math_answer(trimmed);
  if (math_answer_value(n) || (enclosed(n, '(', ')') || enclosed(n, '[', ']'))) return trimmed;
  if (std::optional<std::string> first = nth_number(stated, false)) return *first;
  return trimmed;
}

// The text after the last "answer is" / "answer:", to the end of its sentence or line; a
// leading $...$ or \(...\) is taken whole.
std::optional<std::string> answer_phrase(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; });
  size_t at = npos, length = 0;
  for (const char* phrase : {"answer is", "answer:"}) {
    const size_t p = lower.rfind(phrase);
    if (p != npos && (at == npos || p > at)) {
      at = p;
      length = std::strlen(phrase);
    }
  }
  if (at == npos) return std::nullopt;
  size_t i = at + length;
  while (i < s.size() && (s[i] == ' ' || s[i] == ':' || s[i] == '\t')) ++i;
  const size_t line_end = std::min(s.find('\n', i), s.size());
  std::string rest = s.substr(i, line_end - i);
  for (const auto& [open, close] : {std::pair<const char*, const char*>{"$$", "$$"}, {"$", "$"}, {"\\(", "\\)"},
                                    {"\\[", "\\]"}}) {
    if (rest.rfind(open, 0) == 0) {
      const size_t end = rest.find(close, std::strlen(open));
      if (end != npos) return rest.substr(std::strlen(open), end - std::strlen(open));
    }
  }
  const size_t sentence = rest.find(". ");
  if (sentence != npos) rest.erase(sentence);
  rest = trim_space(rest);
  if (rest.empty()) return std::nullopt;
  return rest;
}

}  // namespace

std::optional<std::string> completion_final_answer(const std::string& completion, bool last_number) {
  const size_t hashes = completion.rfind("####");
  if (hashes != npos) {
    const size_t from = hashes + 4;
    const size_t to = std::min(completion.find('\n', from), completion.size());
    const std::string stated = trim_space(completion.substr(from, to - from));
    if (!stated.empty()) return reduce_prose(stated);
  }
  if (std::optional<std::string> boxed = last_boxed(completion)) return *boxed;
  if (std::optional<std::string> phrase = answer_phrase(completion)) return reduce_prose(*phrase);
  if (last_number) return nth_number(completion, true);
  return std::nullopt;
}

std::string reference_final_answer(const std::string& answer) {
  const size_t hashes = answer.rfind("####");
  if (hashes != npos) {
    const size_t from = hashes + 4;
    const size_t to = std::min(answer.find('\n', from), answer.size());
    return trim_space(answer.substr(from, to - from));
  }
  if (std::optional<std::string> boxed = last_boxed(answer)) return *boxed;
  return trim_space(answer);
}

std::string normalize_math_answer(const std::string& answer) {
  std::string s = unwrap_boxes(answer);
  replace_all(s, "\\$", "");
  for (const char* delimiter : {"$", "\\(", "\\)", "\\[", "\\]"}) replace_all(s, delimiter, "");
  s = strip_text_groups(s);
  for (const char* command : {"\\left", "\\right", "\\displaystyle", "\\degree", "\\circ"}) remove_command(s, command);
  for (const char* spacing : {"\\!", "\\,", "\\;", "\\:", "\\ ", "~", "{,}", "\\%", "%", "\xC2\xB0"})
    replace_all(s, spacing, "");
  for (const char* variant : {"\\dfrac", "\\tfrac", "\\cfrac"}) replace_all(s, variant, "\\frac");
  s.erase(std::remove_if(s.begin(), s.end(), is_space_char), s.end());
  for (const char* exponent : {"^{}", "^"})  // what removing \circ left behind ("90^{}", "90^")
    if (s.size() >= std::strlen(exponent) && s.compare(s.size() - std::strlen(exponent), npos, exponent) == 0)
      s.erase(s.size() - std::strlen(exponent));
  s = brace_single_digit_arguments(s);
  while (!s.empty() && s.back() == '.') s.pop_back();
  const std::vector<size_t> equals = top_level(s, '=');
  if (!equals.empty() && equals.back() + 1 < s.size()) s = s.substr(equals.back() + 1);
  if (s.size() > 1 && s[0] == '+' && (is_digit(s[1]) || s[1] == '.' || s[1] == '\\')) s.erase(0, 1);
  // Thousands separators, except in a tuple or interval, where a comma parts the elements.
  if (s.empty() || (s.front() != '(' && s.front() != '[')) s = drop_thousands_commas(s);
  while (nesting_depth(s) <= kMaxNesting &&
         (enclosed(s, '{', '}') || (enclosed(s, '(', ')') && top_level(s.substr(1, s.size() - 2), ',').empty())))
    s = s.substr(1, s.size() - 2);
  return s;
}

std::optional<double> math_answer_value(const std::string& normalized) {
  if (nesting_depth(normalized) > kMaxNesting) return std::nullopt;
  size_t i = 0;
  std::optional<double> v;
  try {
    v = parse_signed(normalized, i);
  } catch (const std::exception&) {  // std::stod out of range
    return std::nullopt;
  }
  if (!v || i != normalized.size() || !std::isfinite(*v)) return std::nullopt;
  return v;
}

bool math_answers_equal(const std::string& given, const std::string& reference, double tolerance) {
  const std::string a = normalize_math_answer(given), b = normalize_math_answer(reference);
  if (a.empty() || b.empty()) return false;
  if (nesting_depth(a) > kMaxNesting || nesting_depth(b) > kMaxNesting) return a == b;
  return normalized_equal(a, b, tolerance);
}

double MathAnswerReward::score_one(const std::string& completion, const std::string& answer) const {
  std::string text = completion;
  if (config_.answer_in_tags) {
    std::optional<std::string> tagged = tagged_answer(completion, config_.format_open, config_.format_close);
    if (!tagged) return 0.0;
    text = *tagged;
  }
  const std::optional<std::string> given = completion_final_answer(text, config_.math_last_number);
  if (!given) return 0.0;
  return math_answers_equal(*given, reference_final_answer(answer), config_.math_tolerance) ? 1.0 : 0.0;
}

std::vector<double> MathAnswerReward::score(const std::vector<RewardSample>& batch) {
  std::vector<double> out;
  out.reserve(batch.size());
  for (const RewardSample& s : batch) out.push_back(score_one(s.completion, answer_text(s, name())));
  return out;
}

}  // namespace quartet
