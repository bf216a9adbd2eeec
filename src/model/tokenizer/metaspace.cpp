#include "quartet/model/tokenizer/metaspace.hpp"

#include "quartet/model/tokenizer/split_pattern.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t prev = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, prev)) {
    out.append(s, prev, at - prev);
    out += to;
    prev = at + from.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

Metaspace read_metaspace(const JsonFile& f, const nlohmann::json& m, const std::string& jp) {
  Metaspace out;
  out.replacement = f.string_at(f.member(m, "replacement", jp), jp + ".replacement");
  size_t consumed = 0;
  if (out.replacement.empty() || well_formed_at(out.replacement, 0, consumed) != out.replacement.size())
    f.refuse_at(jp + ".replacement", "'" + out.replacement + "' is not one character");
  auto scheme = m.find("prepend_scheme");
  if (scheme != m.end() && !scheme->is_null()) {
    const std::string s = f.string_at(*scheme, jp + ".prepend_scheme");
    if (s == "always") out.prepend = Metaspace::Prepend::Always;
    else if (s == "first") out.prepend = Metaspace::Prepend::First;
    else if (s == "never") out.prepend = Metaspace::Prepend::Never;
    else f.refuse_at(jp + ".prepend_scheme", "'" + s + "' is not always, first or never");
  }
  if (!f.flag(m, "add_prefix_space", true, jp)) {
    if (out.prepend != Metaspace::Prepend::Never)
      f.refuse_at(jp + ".add_prefix_space", "false does not match prepend_scheme (tokenizers refuses this too)");
  }
  out.split = f.flag(m, "split", true, jp);
  return out;
}

void metaspace_pre_tokenize(const Metaspace& m, const TextPiece& piece, std::vector<TextPiece>& out) {
  // A space is one byte and its replacement is aligned to it: an origin covers the replaced
  // text of what it covered.
  TextPiece p{replace_all(piece.text, " ", m.replacement),
              replace_all(piece.text.substr(0, piece.origin), " ", m.replacement).size()};
  const bool prepend = m.prepend == Metaspace::Prepend::Always || (m.prepend == Metaspace::Prepend::First && p.origin > 0);
  if (prepend && !starts_with(p.text, m.replacement)) {
    p.text.insert(0, m.replacement);
    if (p.origin > 0) p.origin += m.replacement.size();
  }
  if (!m.split) {
    out.push_back(std::move(p));
    return;
  }
  const TextPattern at_replacement{nullptr, m.replacement};
  for (const MatchSpan& part : split_by_behavior(at_replacement.find_matches(p.text), SplitBehavior::MergedWithNext))
    if (part.end > part.begin)
      out.push_back({p.text.substr(part.begin, part.end - part.begin), origin_of_slice(p.origin, part.begin, part.end)});
}

void metaspace_decode(const Metaspace& m, std::vector<std::string>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = replace_all(tokens[i], m.replacement, i == 0 && m.prepend != Metaspace::Prepend::Never ? "" : " ");
}

}  // namespace quartet
