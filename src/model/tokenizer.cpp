#include "quartet/model/tokenizer.hpp"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#ifdef QUARTET_WITH_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/model/bpe.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& what) { ::quartet::fail(__FILE__, __LINE__, what); }

// ---------------------------------------------------------------------------------------------
// UTF-8

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code point at s[i] of valid UTF-8; advances i past it.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_length(b0);
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7), or 0 when ill-formed;
// `consumed` is then how many bytes form the maximal ill-formed prefix to replace by one U+FFFD.
size_t well_formed_at(std::string_view s, size_t i, size_t& consumed) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  consumed = 1;
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    consumed = k + 1;
  }
  return n;
}

bool is_valid_utf8(std::string_view s) {
  size_t consumed;
  for (size_t i = 0; i < s.size();) {
    size_t n = well_formed_at(s, i, consumed);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Invalid UTF-8 becomes U+FFFD, one per maximal ill-formed subpart: the W3C/Unicode practice,
// which is what Python's bytes.decode(errors="replace") and Rust's from_utf8_lossy do, so text that
// reached HF through either gets the same tokens here. Never throws; valid input is returned as is.
std::string sanitize_utf8(const std::string& s) {
  if (is_valid_utf8(s)) return s;
  std::string out;
  out.reserve(s.size() + 8);
  size_t consumed;
  for (size_t i = 0; i < s.size();) {
    size_t n = well_formed_at(s, i, consumed);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += consumed;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

// Unicode White_Space, which Rust's char::is_whitespace and its regex \s use (added-token lstrip /
// rstrip in HF).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string describe_char(std::string_view ch) {
  size_t i = 0;
  char32_t cp = next_code_point(ch, i);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "U+%04X", static_cast<unsigned>(cp));
  return "'" + std::string(ch) + "' (" + buf + ")";
}

// ---------------------------------------------------------------------------------------------
// GPT-2's bytes_to_unicode: every byte maps to a printable character so that BPE tokens are
// printable strings; printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.

struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> char_to_byte;  // code point -> byte, -1 when not a byte character
  ByteLevelTable() {
    char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(byte_to_utf8[b], cp);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

std::string byte_level_encode(std::string_view s) {
  const auto& t = byte_level();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

// HF's ByteLevel decoder: a token made only of byte characters gives those bytes, any other token
// (an added token such as " <tool>") its own UTF-8 bytes.
void byte_level_decode_token(std::string_view token, std::string& bytes) {
  const auto& t = byte_level();
  const size_t mark = bytes.size();
  for (size_t i = 0; i < token.size();) {
    char32_t cp = next_code_point(token, i);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      bytes.resize(mark);
      bytes.append(token);
      return;
    }
    bytes += static_cast<char>(t.char_to_byte[cp]);
  }
}

// ---------------------------------------------------------------------------------------------
// NFC. The quick check of UAX #15 proves most text already normalized without any tables beyond
// nfc_quick_check.inc; only text it cannot clear needs the real algorithm, which comes from ICU
// when quartet is built with it (QUARTET_WITH_ICU) and is refused otherwise.

enum NfcQc : uint8_t { NFC_YES, NFC_MAYBE, NFC_NO };
struct NfcRange {
  char32_t first, last;
  uint8_t ccc;
  NfcQc qc;
};
constexpr NfcRange kNfcRanges[] = {
#include "nfc_quick_check.inc"
};

NfcQc nfc_quick_check(std::string_view s) {
  NfcQc result = NFC_YES;
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {  // below U+0300: ccc 0, NFC_QC Yes
      i += utf8_length(static_cast<unsigned char>(s[i]));
      last_ccc = 0;
      continue;
    }
    char32_t cp = next_code_point(s, i);
    auto it = std::upper_bound(std::begin(kNfcRanges), std::end(kNfcRanges), cp,
                               [](char32_t c, const NfcRange& r) { return c < r.first; });
    uint8_t ccc = 0;
    NfcQc qc = NFC_YES;
    if (it != std::begin(kNfcRanges) && cp <= (it - 1)->last) {
      ccc = (it - 1)->ccc;
      qc = (it - 1)->qc;
    }
    if (ccc != 0 && last_ccc > ccc) return NFC_NO;
    if (qc == NFC_NO) return NFC_NO;
    if (qc == NFC_MAYBE) result = NFC_MAYBE;
    last_ccc = ccc;
  }
  return result;
}

#ifdef QUARTET_WITH_ICU
void icu_check(UErrorCode err, const char* what) {
  if (U_FAILURE(err)) refuse(std::string("ICU ") + what + " failed: " + u_errorName(err));
}

std::string icu_nfc(const std::string& s) {
  QUARTET_CHECK(s.size() < (size_t{1} << 30), "NFC: text of " + std::to_string(s.size()) +
                                                  " bytes is too long for ICU");
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  icu_check(err, "unorm2_getNFCInstance");
  std::vector<UChar> src(s.size() + 1), dst;
  int32_t len16 = 0;
  u_strFromUTF8(src.data(), static_cast<int32_t>(src.size()), &len16, s.data(),
                static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strFromUTF8");
  // Composition never lengthens UTF-16 by more than a small factor; retry once if it does.
  dst.resize(static_cast<size_t>(len16) * 3 + 16);
  int32_t n = unorm2_normalize(nfc, src.data(), len16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(n) + 1);
    n = unorm2_normalize(nfc, src.data(), len16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  }
  icu_check(err, "unorm2_normalize");
  std::string out(static_cast<size_t>(n) * 3 + 4, '\0');
  int32_t len8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len8, dst.data(), n, &err);
  icu_check(err, "u_strToUTF8");
  out.resize(static_cast<size_t>(len8));
  return out;
}
#endif

std::string nfc(const std::string& s, const std::string& where) {
  if (nfc_quick_check(s) == NFC_YES) return s;
#ifdef QUARTET_WITH_ICU
  (void)where;
  return icu_nfc(s);
#else
  refuse(where + ": normalizer NFC: this text is not (provably) in NFC already, and quartet was "
                 "built without ICU, which it needs to normalize it (build with QUARTET_WITH_ICU, "
                 "or NFC-normalize the text beforehand)");
#endif
}

// ---------------------------------------------------------------------------------------------
// PCRE2 regexes. Patterns come from tokenizer.json, written for Oniguruma (HF's engine); the one
// difference that matters for the GPT-2/Llama-3/Qwen2 patterns is \s, which in Oniguruma includes
// U+0085 (NEL) and in PCRE2 does not, so \s and \S are widened here.

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

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    const std::string translated = onig_to_pcre2(pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      refuse(where + ": regex /" + pattern + "/ does not compile (PCRE2, at offset " +
             std::to_string(offset) + "): " + reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: without it (not built in, or no executable memory) the
    // interpreter gives the same matches.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) in `s`, which must be valid UTF-8 (callers sanitize
  // first, which is what makes PCRE2_NO_UTF_CHECK safe).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const {
    std::vector<std::pair<size_t, size_t>> out;
    MatchData md(code_);
    for (size_t pos = 0; pos <= s.size();) {
      if (!match(s, pos, 0, md)) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      out.emplace_back(ov[0], ov[1]);
      if (ov[1] > ov[0]) {
        pos = ov[1];
      } else {  // an empty match: step over one character so the loop ends
        if (ov[0] >= s.size()) break;
        pos = ov[0] + utf8_length(static_cast<unsigned char>(s[ov[0]]));
      }
    }
    return out;
  }

  // Whether the pattern matches starting exactly at `pos`.
  bool matches_at(std::string_view s, size_t pos) const {
    MatchData md(code_);
    return match(s, pos, PCRE2_ANCHORED, md);
  }

 private:
  struct MatchData {
    explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
      QUARTET_CHECK(md != nullptr, "PCRE2: out of memory for match data");
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
    pcre2_match_data* get() const { return md; }
    pcre2_match_data* md;
  };

  bool match(std::string_view s, size_t pos, uint32_t options, MatchData& md) const {
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
      refuse(std::string("PCRE2 match failed on a text of ") + std::to_string(s.size()) +
             " bytes: " + reinterpret_cast<const char*>(msg));
    }
    return true;
  }

  pcre2_code* code_ = nullptr;
};

const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------
// tokenizer.json reading. Every refusal names the file and the JSON path of what it refuses.

struct JsonFile {
  std::string path;

  [[noreturn]] void refuse_at(const std::string& json_path, const std::string& what) const {
    refuse(path + ": " + json_path + " " + what);
  }
  const json& member(const json& obj, const char* key, const std::string& json_path) const {
    if (!obj.is_object()) refuse_at(json_path, "is not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) refuse_at(json_path + "." + key, "is missing");
    return *it;
  }
  std::string string_at(const json& v, const std::string& json_path) const {
    if (!v.is_string()) refuse_at(json_path, "is not a string");
    return v.get<std::string>();
  }
  // A flag that may be absent or null (then `fallback`, as HF's serde defaults do).
  bool flag(const json& obj, const char* key, bool fallback, const std::string& json_path) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) refuse_at(json_path + "." + key, "is not true/false");
    return it->get<bool>();
  }
  int64_t id_at(const json& v, const std::string& json_path) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) refuse_at(json_path, "is not a token id");
    return v.get<int64_t>();
  }
  std::string type_of(const json& obj, const std::string& json_path) const {
    return string_at(member(obj, "type", json_path), json_path + ".type");
  }
};

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    refuse(path + ": malformed JSON: " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// The Hugging Face pipeline: added tokens, normalizer, pre-tokenizer, BPE, post-processor, and
// the decoder on the way back.

struct AddedToken {
  int64_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Added tokens are found leftmost-longest, as HF's Aho-Corasick automaton does; they are few and
// each starts with a distinctive byte, so a per-first-byte list beats building an automaton.
class AddedTokenMatcher {
 public:
  void add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    auto& list = by_first_byte_[static_cast<unsigned char>(pattern[0])];
    list.push_back({std::move(pattern), token});
    std::stable_sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  const Entry* longest_at(std::string_view s, size_t pos) const {
    for (const Entry& e : by_first_byte_[static_cast<unsigned char>(s[pos])])
      if (s.compare(pos, e.pattern.size(), e.pattern) == 0) return &e;
    return nullptr;
  }

 private:
  std::array<std::vector<Entry>, 256> by_first_byte_;
  bool empty_ = true;
};

struct Piece {
  std::string text;  // when id < 0
  int64_t id = -1;   // an added token
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind;
  std::shared_ptr<const Regex> regex;  // Split with a Regex pattern, ByteLevel with use_regex
  std::string literal;                 // Split with a String pattern
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);

  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;

 private:
  void build(const json& spec);
  void parse_added_tokens(const JsonFile& f, const json& spec);
  void parse_normalizer(const JsonFile& f, const json& n, const std::string& jp);
  void parse_pre_tokenizer(const JsonFile& f, const json& p, const std::string& jp);
  void parse_model(const JsonFile& f, const json& m);
  void parse_post_processor(const JsonFile& f, const json& p, const std::string& jp);
  void parse_decoder(const JsonFile& f, const json& d, const std::string& jp);

  void split_on_added(const std::string& s, const AddedTokenMatcher& m, std::vector<Piece>& out) const;
  std::vector<std::string> pre_tokenize(const std::string& s) const;
  void check_id(int64_t id) const;

  std::string path_;
  std::unique_ptr<BpeModel> bpe_;
  std::vector<AddedToken> added_;
  std::unordered_map<int64_t, size_t> added_by_id_;
  std::unordered_map<std::string, int64_t> added_by_content_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  bool nfc_ = false;
  std::vector<PreTokenizerStep> pre_steps_;
  std::shared_ptr<const Regex> word_char_;  // \w, for added tokens with single_word
  // Post-processor for one sequence: the ids before and after it (TemplateProcessing).
  std::vector<int64_t> template_before_, template_after_;
  bool byte_level_decoder_ = false;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
};

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  try {
    build(read_json(path));
  } catch (const json::exception& e) {  // a value of the wrong JSON type somewhere
    refuse(path + ": " + e.what());
  }
}

void HfTokenizer::build(const json& spec) {
  const std::string& path = path_;
  const JsonFile f{path};
  if (!spec.is_object()) f.refuse_at("(root)", "is not a JSON object");
  // The order matters: the model's vocabulary must exist before added tokens and templates are
  // checked against it.
  parse_model(f, f.member(spec, "model", "(root)"));
  parse_added_tokens(f, spec);
  auto get = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = spec.find(key);
    return it == spec.end() ? null_value : *it;
  };
  parse_normalizer(f, get("normalizer"), "normalizer");
  parse_pre_tokenizer(f, get("pre_tokenizer"), "pre_tokenizer");
  parse_post_processor(f, get("post_processor"), "post_processor");
  parse_decoder(f, get("decoder"), "decoder");
  // Truncation and padding are per-call settings of HF's encode_batch; quartet pads and truncates
  // where it batches, so they are ignored here.

  for (const AddedToken& t : added_) {
    // A normalized added token is looked for in normalized text, so in its normalized form.
    AddedTokenMatcher& m = (t.normalized && nfc_) ? normalized_matcher_ : raw_matcher_;
    m.add((t.normalized && nfc_) ? nfc(t.content, path_ + ": added token") : t.content, &t);
  }
  if (std::any_of(added_.begin(), added_.end(), [](const AddedToken& t) { return t.single_word; }))
    word_char_ = std::make_shared<const Regex>("\\w", path_);

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

void HfTokenizer::parse_model(const JsonFile& f, const json& m) {
  // Files from before the "type" field are BPE when they have merges.
  std::string type = m.is_object() && m.contains("type") ? f.type_of(m, "model")
                     : (m.is_object() && m.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    f.refuse_at("model.type", "'" + type + "' is not supported (BPE only)");
  auto dropout = m.find("dropout");
  if (dropout != m.end() && !dropout->is_null() && dropout->get<double>() != 0.0)
    f.refuse_at("model.dropout", "is not supported (BPE dropout is for training)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      f.refuse_at(std::string("model.") + key, "is not supported (byte-level BPE has none)");
  }
  if (f.flag(m, "byte_fallback", false, "model"))
    f.refuse_at("model.byte_fallback", "is not supported (byte-level BPE needs none)");

  const json& v = f.member(m, "vocab", "model");
  if (!v.is_object()) f.refuse_at("model.vocab", "is not a JSON object of token -> id");
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it)
    vocab.emplace(it.key(), f.id_at(it.value(), "model.vocab['" + it.key() + "']"));

  const json& mg = f.member(m, "merges", "model");
  if (!mg.is_array()) f.refuse_at("model.merges", "is not a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(mg.size());
  for (size_t i = 0; i < mg.size(); ++i) {
    const std::string jp = "model.merges[" + std::to_string(i) + "]";
    const json& e = mg[i];
    if (e.is_string()) {  // "a b": byte-level tokens never contain a space
      const std::string s = e.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        f.refuse_at(jp, "'" + s + "' is not of the form 'a b'");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      f.refuse_at(jp, "is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  std::optional<std::string> unk;
  auto u = m.find("unk_token");
  if (u != m.end() && !u->is_null()) unk = f.string_at(*u, "model.unk_token");
  bpe_ = std::make_unique<BpeModel>(std::move(vocab), merges, f.flag(m, "ignore_merges", false, "model"),
                                    unk, f.flag(m, "fuse_unk", false, "model"), path_);
}

void HfTokenizer::parse_added_tokens(const JsonFile& f, const json& spec) {
  auto it = spec.find("added_tokens");
  if (it == spec.end() || it->is_null()) return;
  if (!it->is_array()) f.refuse_at("added_tokens", "is not a list");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string jp = "added_tokens[" + std::to_string(i) + "]";
    const json& t = (*it)[i];
    AddedToken a;
    a.id = f.id_at(f.member(t, "id", jp), jp + ".id");
    a.content = f.string_at(f.member(t, "content", jp), jp + ".content");
    if (!is_valid_utf8(a.content)) f.refuse_at(jp + ".content", "is not valid UTF-8");
    a.special = f.flag(t, "special", false, jp);
    a.lstrip = f.flag(t, "lstrip", false, jp);
    a.rstrip = f.flag(t, "rstrip", false, jp);
    a.single_word = f.flag(t, "single_word", false, jp);
    a.normalized = f.flag(t, "normalized", !a.special, jp);
    if (added_by_id_.count(a.id)) f.refuse_at(jp + ".id", "repeats id " + std::to_string(a.id));
    added_by_id_[a.id] = added_.size();
    added_by_content_[a.content] = a.id;
    added_.push_back(std::move(a));
  }
}

void HfTokenizer::parse_normalizer(const JsonFile& f, const json& n, const std::string& jp) {
  if (n.is_null()) return;
  const std::string type = f.type_of(n, jp);
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    const json& list = f.member(n, "normalizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".normalizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(f, list[i], jp + ".normalizers[" + std::to_string(i) + "]");
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (null, NFC or a Sequence of NFC)");
  }
}

void HfTokenizer::parse_pre_tokenizer(const JsonFile& f, const json& p, const std::string& jp) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  if (type == "Sequence") {
    const json& list = f.member(p, "pretokenizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".pretokenizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(f, list[i], jp + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    PreTokenizerStep s{PreTokenizerStep::Kind::ByteLevel, nullptr, {}, SplitBehavior::Isolated, false, false};
    s.add_prefix_space = f.flag(p, "add_prefix_space", true, jp);
    if (f.flag(p, "use_regex", true, jp)) s.regex = std::make_shared<const Regex>(kGpt2Pattern, path_);
    pre_steps_.push_back(std::move(s));
  } else if (type == "Split") {
    PreTokenizerStep s{PreTokenizerStep::Kind::Split, nullptr, {}, SplitBehavior::Isolated, false, false};
    const json& pat = f.member(p, "pattern", jp);
    if (pat.is_object() && pat.contains("Regex")) {
      s.regex = std::make_shared<const Regex>(f.string_at(pat["Regex"], jp + ".pattern.Regex"),
                                              path_ + ": " + jp + ".pattern.Regex");
    } else if (pat.is_object() && pat.contains("String")) {
      s.literal = f.string_at(pat["String"], jp + ".pattern.String");
      if (s.literal.empty()) f.refuse_at(jp + ".pattern.String", "is empty");
    } else {
      f.refuse_at(jp + ".pattern", "is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    const std::string b = f.string_at(f.member(p, "behavior", jp), jp + ".behavior");
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::Removed},
        {"Isolated", SplitBehavior::Isolated},
        {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
        {"MergedWithNext", SplitBehavior::MergedWithNext},
        {"Contiguous", SplitBehavior::Contiguous}};
    auto it = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                           [&](const auto& kv) { return b == kv.first; });
    if (it == std::end(kBehaviors)) f.refuse_at(jp + ".behavior", "'" + b + "' is not a split behavior");
    s.behavior = it->second;
    s.invert = f.flag(p, "invert", false, jp);
    pre_steps_.push_back(std::move(s));
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, Split or a Sequence of them)");
  }
}

void HfTokenizer::parse_post_processor(const JsonFile& f, const json& p, const std::string& jp) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  if (type == "ByteLevel") return;  // it only trims offsets, which quartet does not report
  if (type == "Sequence") {
    const json& list = f.member(p, "processors", jp);
    if (!list.is_array()) f.refuse_at(jp + ".processors", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(f, list[i], jp + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, TemplateProcessing or a Sequence of them)");
  if (!template_before_.empty() || !template_after_.empty())
    f.refuse_at(jp, "is a second TemplateProcessing");
  const json& single = f.member(p, "single", jp);
  if (!single.is_array()) f.refuse_at(jp + ".single", "is not a list");
  const json& specials = f.member(p, "special_tokens", jp);
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string ip = jp + ".single[" + std::to_string(i) + "]";
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      const std::string id = f.string_at(f.member(item["Sequence"], "id", ip + ".Sequence"), ip + ".Sequence.id");
      if (id != "A" || seen_sequence) f.refuse_at(ip, "is not the one sequence A of a single-sequence template");
      seen_sequence = true;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name =
          f.string_at(f.member(item["SpecialToken"], "id", ip + ".SpecialToken"), ip + ".SpecialToken.id");
      const json& entry = f.member(specials, name.c_str(), jp + ".special_tokens");
      const json& ids = f.member(entry, "ids", jp + ".special_tokens['" + name + "']");
      if (!ids.is_array()) f.refuse_at(jp + ".special_tokens['" + name + "'].ids", "is not a list");
      auto& dst = seen_sequence ? template_after_ : template_before_;
      for (size_t k = 0; k < ids.size(); ++k)
        dst.push_back(f.id_at(ids[k], jp + ".special_tokens['" + name + "'].ids[" + std::to_string(k) + "]"));
    } else {
      f.refuse_at(ip, "is neither a Sequence nor a SpecialToken");
    }
  }
  if (!seen_sequence) f.refuse_at(jp + ".single", "has no sequence $A");
  // The tokenizer file itself says which token starts every text (Llama-3's <|begin_of_text|>).
  if (template_before_.size() == 1) bos_id = template_before_[0];
}

void HfTokenizer::parse_decoder(const JsonFile& f, const json& d, const std::string& jp) {
  if (d.is_null()) return;
  const std::string type = f.type_of(d, jp);
  if (type == "ByteLevel") {
    byte_level_decoder_ = true;
  } else if (type == "Sequence") {
    const json& list = f.member(d, "decoders", jp);
    if (!list.is_array()) f.refuse_at(jp + ".decoders", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(f, list[i], jp + ".decoders[" + std::to_string(i) + "]");
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel or a Sequence of it)");
  }
}

// HF's AddedVocabulary::find_matches, including its quirks: a match rejected by single_word is
// skipped whole, and lstrip never reaches back into what the previous match took.
void HfTokenizer::split_on_added(const std::string& s, const AddedTokenMatcher& m,
                                 std::vector<Piece>& out) const {
  if (m.empty()) {
    if (!s.empty()) out.push_back({s, -1});
    return;
  }
  auto word_before = [&](size_t pos) {
    if (pos == 0) return false;
    size_t b = pos - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    return word_char_->matches_at(s, b);
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
    if (t.single_word && (word_before(start) || (stop < s.size() && word_char_->matches_at(s, stop))))
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
    if (start > start_offset) out.push_back({s.substr(start_offset, start - start_offset), -1});
    out.push_back({std::string(), t.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({s.substr(start_offset), -1});
}

std::vector<std::string> HfTokenizer::pre_tokenize(const std::string& s) const {
  std::vector<std::string> pieces{s}, next;
  for (const PreTokenizerStep& step : pre_steps_) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.kind == PreTokenizerStep::Kind::ByteLevel) {
        if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') piece.insert(piece.begin(), ' ');
        if (!step.regex) {
          next.push_back(byte_level_encode(piece));
          continue;
        }
        size_t prev = 0;
        for (auto [b, e] : step.regex->find_all(piece)) {
          if (b > prev) next.push_back(byte_level_encode(std::string_view(piece).substr(prev, b - prev)));
          if (e > b) next.push_back(byte_level_encode(std::string_view(piece).substr(b, e - b)));
          prev = e;
        }
        if (prev < piece.size()) next.push_back(byte_level_encode(std::string_view(piece).substr(prev)));
        continue;
      }
      // Split: the whole piece as alternating (range, is_match) spans, as HF's Pattern gives.
      std::vector<std::pair<std::pair<size_t, size_t>, bool>> spans;
      auto add_match = [&](size_t b, size_t e, size_t& prev) {
        if (b > prev) spans.push_back({{prev, b}, false});
        spans.push_back({{b, e}, true});
        prev = e;
      };
      size_t prev = 0;
      if (step.regex) {
        for (auto [b, e] : step.regex->find_all(piece)) add_match(b, e, prev);
      } else {
        for (size_t at = piece.find(step.literal); at != std::string::npos;
             at = piece.find(step.literal, prev))
          add_match(at, at + step.literal.size(), prev);
      }
      if (prev < piece.size()) spans.push_back({{prev, piece.size()}, false});
      if (step.invert)
        for (auto& sp : spans) sp.second = !sp.second;

      // (range, remove) by behavior, HF's NormalizedString::split.
      std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;
      switch (step.behavior) {
        case SplitBehavior::Isolated:
          for (auto& sp : spans) parts.push_back({sp.first, false});
          break;
        case SplitBehavior::Removed:
          parts = spans;
          break;
        case SplitBehavior::Contiguous: {
          bool previous = false;
          for (auto& sp : spans) {
            if (sp.second == previous && !parts.empty()) parts.back().first.second = sp.first.second;
            else parts.push_back({sp.first, false});
            previous = sp.second;
          }
          break;
        }
        case SplitBehavior::MergedWithPrevious: {
          bool previous = false;
          for (auto& sp : spans) {
            if (sp.second && !previous && !parts.empty()) parts.back().first.second = sp.first.second;
            else parts.push_back({sp.first, false});
            previous = sp.second;
          }
          break;
        }
        case SplitBehavior::MergedWithNext: {
          bool previous = false;
          for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
            if (it->second && !previous && !parts.empty()) parts.back().first.first = it->first.first;
            else parts.push_back({it->first, false});
            previous = it->second;
          }
          std::reverse(parts.begin(), parts.end());
          break;
        }
      }
      for (auto& [range, remove] : parts)
        if (!remove && range.second > range.first)
          next.push_back(piece.substr(range.first, range.second - range.first));
    }
    pieces.swap(next);
  }
  return pieces;
}

std::vector<int64_t> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const std::string clean = sanitize_utf8(text);
  std::vector<Piece> first, pieces;
  split_on_added(clean, raw_matcher_, first);
  for (Piece& p : first) {
    if (p.id >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    split_on_added(nfc_ ? nfc(p.text, path_) : p.text, normalized_matcher_, pieces);
  }
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = template_before_;
  ids.reserve(clean.size() / 2 + ids.size() + template_after_.size());
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    for (const std::string& word : pre_tokenize(p.text)) bpe_->encode_word(word, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

void HfTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size() || !id_known_[static_cast<size_t>(id)])
    refuse(path_ + ": token id " + std::to_string(id) + " is not in the vocabulary (size " +
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

// ---------------------------------------------------------------------------------------------
// Character vocabulary for the demo tasks.

class CharTokenizer final : public Tokenizer {
 public:
  CharTokenizer(const std::string& alphabet, const std::vector<std::string>& specials) {
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

  // Special tokens written out in the text are recognised (longest first, as HF does); every other
  // character must be in the alphabet. With add_special_tokens, the BOS token goes first.
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override {
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

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    for (int64_t id : ids) {
      check_id(id);
      if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
      out += tokens_[static_cast<size_t>(id)];
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const override {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string id_to_token(int64_t id) const override {
    check_id(id);
    return tokens_[static_cast<size_t>(id)];
  }

 private:
  void check_id(int64_t id) const {
    QUARTET_CHECK(id >= 0 && id < vocab_size(), "char tokenizer: token id " + std::to_string(id) +
                                                    " is not in the vocabulary (size " +
                                                    std::to_string(vocab_size()) + ")");
  }
  std::vector<std::string> tokens_;
  std::vector<bool> special_;
  std::vector<std::string> specials_by_length_;
  std::unordered_map<std::string, int64_t> ids_;
};

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

bool full_nfc_available() {
#ifdef QUARTET_WITH_ICU
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<HfTokenizer>(tokenizer_json_path);
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir) {
  const std::string tok_path = model_dir + "/tokenizer.json";
  if (!file_exists(tok_path))
    refuse(model_dir + ": no tokenizer.json (quartet reads only the fast-tokenizer file)");
  auto tok = load_hf_tokenizer(tok_path);

  // tokenizer_config.json is what transformers' tokenizer reports, so it wins; config.json
  // fills in what it leaves open.
  const std::string cfg_path = model_dir + "/tokenizer_config.json";
  if (file_exists(cfg_path)) {
    const json cfg = read_json(cfg_path);
    const JsonFile f{cfg_path};
    auto take = [&](const char* key, std::optional<int64_t>& slot) {
      auto it = cfg.find(key);
      if (it == cfg.end() || it->is_null()) return;
      std::string token = it->is_object() ? f.string_at(f.member(*it, "content", key), std::string(key) + ".content")
                                          : f.string_at(*it, key);
      auto id = tok->token_to_id(token);
      if (!id) f.refuse_at(key, "'" + token + "' is not a token of " + tok_path);
      slot = *id;
    };
    if (cfg.is_object()) {
      take("bos_token", tok->bos_id);
      take("eos_token", tok->eos_id);
      take("pad_token", tok->pad_id);
    }
  }
  const std::string model_cfg_path = model_dir + "/config.json";
  if (file_exists(model_cfg_path)) {
    const json cfg = read_json(model_cfg_path);
    const JsonFile f{model_cfg_path};
    auto take = [&](const char* key, std::optional<int64_t>& slot) {
      auto it = cfg.find(key);
      if (slot || it == cfg.end() || it->is_null()) return;
      // Llama-3.1 lists several eos ids; the first is the tokenizer's own end of text.
      const json& v = it->is_array() ? (it->empty() ? *it : (*it)[0]) : *it;
      if (v.is_array()) return;
      int64_t id = f.id_at(v, key);
      if (id >= tok->vocab_size())
        f.refuse_at(key, std::to_string(id) + " is beyond the vocabulary of " + tok_path);
      slot = id;
    };
    if (cfg.is_object()) {
      take("bos_token_id", tok->bos_id);
      take("eos_token_id", tok->eos_id);
      take("pad_token_id", tok->pad_id);
    }
  }
  return tok;
}

std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet,
                                               const std::vector<std::string>& specials) {
  return std::make_unique<CharTokenizer>(alphabet, specials);
}

}  // namespace quartet
