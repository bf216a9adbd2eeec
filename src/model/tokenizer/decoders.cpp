#include "quartet/model/tokenizer/decoders.hpp"

#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/byte_level.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

// All the tokens as one string: each made only of byte-level characters as those bytes, any
// other as its own text; then bytes that do not form UTF-8 become U+FFFD.
void byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) byte_level_decode_token(t, bytes);
  tokens.assign(1, sanitize_utf8(bytes));
}

// Rust's u8::from_str_radix(_, 16) on the two characters of "<0xNN>": two hex digits, or a '+'
// and one.
int hex_byte(const std::string& t) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = digit(t[3]), lo = digit(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;
  return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

// Runs of "<0xNN>" tokens become the text of their bytes, or one U+FFFD a byte when those bytes
// are not UTF-8.
void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  size_t run_length = 0;
  auto flush = [&] {
    if (run_length == 0) return;
    if (is_valid_utf8(run)) out.push_back(run);
    else
      for (size_t i = 0; i < run_length; ++i) out.emplace_back(kReplacementChar);
    run.clear();
    run_length = 0;
  };
  for (std::string& t : tokens) {
    const int b = hex_byte(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      ++run_length;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens.swap(out);
}

void fuse(std::vector<std::string>& tokens) {
  std::string all;
  for (const std::string& t : tokens) all += t;
  tokens.assign(1, std::move(all));
}

// Up to `start` leading and `stop` trailing copies of the character, per token.
void strip(const DecoderStep& step, std::vector<std::string>& tokens, const std::string& where) {
  for (std::string& t : tokens) {
    std::vector<size_t> starts;  // byte offset of each character
    for (size_t i = 0; i < t.size(); i += utf8_length(static_cast<unsigned char>(t[i]))) starts.push_back(i);
    const size_t n = starts.size();
    auto is_content = [&](size_t k) { return t.compare(starts[k], step.content.size(), step.content) == 0 &&
                                             (k + 1 == n ? t.size() : starts[k + 1]) - starts[k] == step.content.size(); };
    size_t first = 0, last = n;
    for (size_t k = 0; k < step.start && k < n && is_content(k); ++k) first = k + 1;
    for (size_t i = 0; i < step.stop; ++i) {
      if (i >= n) fail(__FILE__, __LINE__, where + ": decoder Strip: the token '" + t + "' has fewer than " +
                                               std::to_string(step.stop) + " characters to strip (tokenizers fails here too)");
      if (!is_content(n - i - 1)) break;
      last = n - i - 1;
    }
    QUARTET_CHECK(first <= last, where + ": decoder Strip: the token '" + t +
                                     "' is stripped from both ends past itself (tokenizers fails here too)");
    const size_t b = first < n ? starts[first] : t.size(), e = last < n ? starts[last] : t.size();
    t = t.substr(b, e - b);
  }
}

void replace(const DecoderStep& step, std::vector<std::string>& tokens) {
  for (std::string& t : tokens) {
    std::string out;
    for (const MatchSpan& sp : step.pattern.find_matches(t))
      out += sp.match ? step.content : t.substr(sp.begin, sp.end - sp.begin);
    t = std::move(out);
  }
}

void read_step(const JsonFile& f, const nlohmann::json& d, const std::string& jp, Decoder& out) {
  const std::string type = f.type_of(d, jp);
  DecoderStep s{DecoderStep::Kind::Fuse, {}, {}, 0, 0, {}};
  if (type == "Sequence") {
    const nlohmann::json& list = f.member(d, "decoders", jp);
    if (!list.is_array()) f.refuse_at(jp + ".decoders", "is not a list");
    for (size_t i = 0; i < list.size(); ++i) read_step(f, list[i], jp + ".decoders[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::Strip;
    s.content = f.string_at(f.member(d, "content", jp), jp + ".content");
    size_t consumed = 0;
    if (s.content.empty() || well_formed_at(s.content, 0, consumed) != s.content.size())
      f.refuse_at(jp + ".content", "'" + s.content + "' is not one character");
    s.start = f.count_at(f.member(d, "start", jp), jp + ".start");
    s.stop = f.count_at(f.member(d, "stop", jp), jp + ".stop");
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::Replace;
    s.pattern = read_pattern(f, f.member(d, "pattern", jp), jp + ".pattern");
    s.content = f.string_at(f.member(d, "content", jp), jp + ".content");
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::Metaspace;
    s.metaspace = read_metaspace(f, d, jp);
  } else {
    f.refuse_at(jp + ".type", "'" + type +
                                  "' is not supported (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace or a Sequence of them)");
  }
  out.steps.push_back(std::move(s));
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens, const std::string& where) const {
  if (!present) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel: byte_level(tokens); break;
      case DecoderStep::Kind::ByteFallback: byte_fallback(tokens); break;
      case DecoderStep::Kind::Fuse: fuse(tokens); break;
      case DecoderStep::Kind::Strip: strip(step, tokens, where); break;
      case DecoderStep::Kind::Replace: replace(step, tokens); break;
      case DecoderStep::Kind::Metaspace: metaspace_decode(step.metaspace, tokens); break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

Decoder read_decoder(const JsonFile& f, const nlohmann::json& d, const std::string& json_path) {
  Decoder out;
  if (d.is_null()) return out;
  out.present = true;
  read_step(f, d, json_path, out);
  return out;
}

}  // namespace quartet
