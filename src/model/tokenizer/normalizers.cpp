#include "quartet/model/tokenizer/normalizers.hpp"

#include <algorithm>
#include <utility>

#include "quartet/model/tokenizer/text_origin.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

namespace {

// HF's NormalizedString::replace. Each character of a replacement is aligned to the last byte
// of what it replaces (to the byte before an empty match; an empty match at 0 to the start), so
// the new origin counts the output bytes whose alignment lies in the old origin.
void replace(const NormalizerStep& step, std::string& text, size_t& origin) {
  std::string out;
  out.reserve(text.size());
  size_t new_origin = 0;
  bool counting = origin > 0;
  for (const MatchSpan& sp : step.pattern.find_matches(text)) {
    if (!sp.match) {
      if (counting) {
        const size_t kept = origin_of_slice(origin, sp.begin, sp.end);
        new_origin += kept;
        counting = kept == sp.end - sp.begin;
      }
      out.append(text, sp.begin, sp.end - sp.begin);
      continue;
    }
    if (counting && !step.content.empty()) {
      if (sp.end == 0 || sp.end - 1 < origin) new_origin += step.content.size();
      else counting = false;
    }
    out += step.content;
  }
  text = std::move(out);
  origin = new_origin;
}

// HF aligns each character a normalization produces to the first input character it comes
// from, so the input's first characters stay at the front: the origin becomes what they
// normalize to (exact unless the normalization reorders marks across the origin's end).
void unicode(const NormalizerStep& step, std::string& text, size_t& origin) {
  std::string out = unicode_normalize(text, step.form);
  if (out == text) return;
  if (origin > 0) {
    size_t n = std::min(unicode_normalize(std::string_view(text).substr(0, origin), step.form).size(), out.size());
    while (n < out.size() && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) ++n;
    origin = std::max<size_t>(n, 1);
  }
  text = std::move(out);
}

void read_step(const JsonFile& f, const nlohmann::json& n, const std::string& jp, Normalizer& out) {
  if (n.is_null()) return;
  const std::string type = f.type_of(n, jp);
  NormalizerStep s{NormalizerStep::Kind::Unicode, {}, {}, UnicodeForm::NFC};
  if (type == "Sequence") {
    const nlohmann::json& list = f.member(n, "normalizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".normalizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_step(f, list[i], jp + ".normalizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "NFC" || type == "NFKC") {
    s.form = type == "NFC" ? UnicodeForm::NFC : UnicodeForm::NFKC;
  } else if (type == "Prepend") {
    s.kind = NormalizerStep::Kind::Prepend;
    s.content = f.string_at(f.member(n, "prepend", jp), jp + ".prepend");
  } else if (type == "Replace") {
    s.kind = NormalizerStep::Kind::Replace;
    s.pattern = read_pattern(f, f.member(n, "pattern", jp), jp + ".pattern");
    s.content = f.string_at(f.member(n, "content", jp), jp + ".content");
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (Prepend, Replace, NFC, NFKC or a Sequence of them)");
  }
  out.add(std::move(s));
}

}  // namespace

void Normalizer::normalize(std::string& text, size_t& origin) const {
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::Prepend:
        if (text.empty()) break;  // HF prepends to non-empty text only
        text.insert(0, step.content);
        if (origin > 0) origin += step.content.size();  // aligned to the first character
        break;
      case NormalizerStep::Kind::Replace:
        replace(step, text, origin);
        break;
      case NormalizerStep::Kind::Unicode:
        unicode(step, text, origin);
        break;
    }
  }
}

std::string Normalizer::normalize(std::string text) const {
  size_t origin = 0;
  normalize(text, origin);
  return text;
}

Normalizer read_normalizer(const JsonFile& f, const nlohmann::json& n, const std::string& json_path) {
  Normalizer out;
  read_step(f, n, json_path, out);
  return out;
}

}  // namespace quartet
