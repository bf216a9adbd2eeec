#include "quartet/model/tokenizer/pre_tokenizer.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string_view>
#include <utility>

#include "quartet/model/tokenizer/byte_level.hpp"
#include "quartet/model/tokenizer/text_origin.hpp"

namespace quartet {

namespace {

// ByteLevel: the optional prefix space, GPT-2's pattern, then every byte as its character (each
// character of a byte's encoding is aligned to the byte's character, so an origin covers the
// encoding of what it covered).
void byte_level_step(const PreTokenizerStep& step, TextPiece piece, std::vector<TextPiece>& next) {
  std::string& s = piece.text;
  if (step.add_prefix_space && !s.empty() && s[0] != ' ') {
    s.insert(s.begin(), ' ');
    if (piece.origin > 0) ++piece.origin;
  }
  auto emit = [&](size_t b, size_t e) {
    const size_t origin = origin_of_slice(piece.origin, b, e);
    next.push_back({byte_level_encode(std::string_view(s).substr(b, e - b)),
                    byte_level_encode(std::string_view(s).substr(b, origin)).size()});
  };
  if (!step.regex) {
    emit(0, s.size());
    return;
  }
  size_t prev = 0;
  for (auto [b, e] : step.regex->find_all(s)) {
    if (b > prev) emit(prev, b);
    if (e > b) emit(b, e);
    prev = e;
  }
  if (prev < s.size()) emit(prev, s.size());
}

void split_step(const PreTokenizerStep& step, const TextPiece& piece, std::vector<TextPiece>& next) {
  std::vector<MatchSpan> spans = step.pattern.find_matches(piece.text);
  if (step.invert)
    for (MatchSpan& sp : spans) sp.match = !sp.match;
  for (const MatchSpan& part : split_by_behavior(spans, step.behavior))
    if (!part.match && part.end > part.begin)
      next.push_back({piece.text.substr(part.begin, part.end - part.begin),
                      origin_of_slice(piece.origin, part.begin, part.end)});
}

SplitBehavior read_behavior(const JsonFile& f, const nlohmann::json& p, const std::string& jp) {
  const std::string b = f.string_at(f.member(p, "behavior", jp), jp + ".behavior");
  static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
      {"Removed", SplitBehavior::Removed},
      {"Isolated", SplitBehavior::Isolated},
      {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
      {"MergedWithNext", SplitBehavior::MergedWithNext},
      {"Contiguous", SplitBehavior::Contiguous}};
  auto it = std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& kv) { return b == kv.first; });
  if (it == std::end(kBehaviors)) f.refuse_at(jp + ".behavior", "'" + b + "' is not a split behavior");
  return it->second;
}

void read_step(const JsonFile& f, const nlohmann::json& p, const std::string& jp, std::vector<PreTokenizerStep>& out) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  PreTokenizerStep s{PreTokenizerStep::Kind::Split, {}, nullptr, SplitBehavior::Isolated, false, false, {}};
  if (type == "Sequence") {
    const nlohmann::json& list = f.member(p, "pretokenizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".pretokenizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_step(f, list[i], jp + ".pretokenizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = f.flag(p, "add_prefix_space", true, jp);
    if (f.flag(p, "use_regex", true, jp)) s.regex = std::make_shared<const Regex>(kGpt2Pattern, f.path);
  } else if (type == "Split") {
    s.pattern = read_pattern(f, f.member(p, "pattern", jp), jp + ".pattern");
    s.behavior = read_behavior(f, p, jp);
    s.invert = f.flag(p, "invert", false, jp);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.metaspace = read_metaspace(f, p, jp);
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, Split, Metaspace or a Sequence of them)");
  }
  out.push_back(std::move(s));
}

}  // namespace

std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& s, size_t origin) {
  std::vector<TextPiece> pieces{{s, origin}}, next;
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    for (TextPiece& piece : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::ByteLevel: byte_level_step(step, std::move(piece), next); break;
        case PreTokenizerStep::Kind::Split: split_step(step, piece, next); break;
        case PreTokenizerStep::Kind::Metaspace: metaspace_pre_tokenize(step.metaspace, piece, next); break;
      }
    }
    pieces.swap(next);
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (TextPiece& p : pieces) words.push_back(std::move(p.text));
  return words;
}

std::vector<PreTokenizerStep> read_pre_tokenizer(const JsonFile& f, const nlohmann::json& p, const std::string& json_path) {
  std::vector<PreTokenizerStep> steps;
  read_step(f, p, json_path, steps);
  return steps;
}

}  // namespace quartet
