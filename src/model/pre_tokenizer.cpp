#include "quartet/model/pre_tokenizer.hpp"

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>

#include "quartet/model/byte_level.hpp"

namespace quartet {

namespace {

// A range [first, second) of a piece and a flag (is a match; or, in parts, is removed).
using Span = std::pair<std::pair<size_t, size_t>, bool>;

// ByteLevel: the optional prefix space, GPT-2's pattern, then every byte as its character.
void byte_level_step(const PreTokenizerStep& step, std::string& piece, std::vector<std::string>& next) {
  if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') piece.insert(piece.begin(), ' ');
  if (!step.regex) {
    next.push_back(byte_level_encode(piece));
    return;
  }
  size_t prev = 0;
  for (auto [b, e] : step.regex->find_all(piece)) {
    if (b > prev) next.push_back(byte_level_encode(std::string_view(piece).substr(prev, b - prev)));
    if (e > b) next.push_back(byte_level_encode(std::string_view(piece).substr(b, e - b)));
    prev = e;
  }
  if (prev < piece.size()) next.push_back(byte_level_encode(std::string_view(piece).substr(prev)));
}

// The whole piece as alternating (range, is_match) spans, as HF's Pattern gives.
std::vector<Span> split_spans(const PreTokenizerStep& step, const std::string& piece) {
  std::vector<Span> spans;
  auto add_match = [&](size_t b, size_t e, size_t& prev) {
    if (b > prev) spans.push_back({{prev, b}, false});
    spans.push_back({{b, e}, true});
    prev = e;
  };
  size_t prev = 0;
  if (step.regex) {
    for (auto [b, e] : step.regex->find_all(piece)) add_match(b, e, prev);
  } else {
    for (size_t at = piece.find(step.literal); at != std::string::npos; at = piece.find(step.literal, prev))
      add_match(at, at + step.literal.size(), prev);
  }
  if (prev < piece.size()) spans.push_back({{prev, piece.size()}, false});
  if (step.invert)
    for (auto& sp : spans) sp.second = !sp.second;
  return spans;
}

// (range, remove) by behavior, HF's NormalizedString::split.
std::vector<Span> split_parts(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Span> parts;
  switch (behavior) {
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
  return parts;
}

void split_step(const PreTokenizerStep& step, const std::string& piece, std::vector<std::string>& next) {
  for (auto& [range, remove] : split_parts(split_spans(step, piece), step.behavior))
    if (!remove && range.second > range.first) next.push_back(piece.substr(range.first, range.second - range.first));
}

}  // namespace

std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& s) {
  std::vector<std::string> pieces{s}, next;
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.kind == PreTokenizerStep::Kind::ByteLevel) byte_level_step(step, piece, next);
      else split_step(step, piece, next);
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace quartet
