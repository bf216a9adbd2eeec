#include "quartet/model/tokenizer_json.hpp"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/json_file.hpp"
#include "quartet/model/utf8.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

void parse_model(TokenizerJson& out, const JsonFile& f, const json& m) {
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
  out.bpe = std::make_unique<BpeModel>(std::move(vocab), merges, f.flag(m, "ignore_merges", false, "model"),
                                    unk, f.flag(m, "fuse_unk", false, "model"), f.path);
}

void parse_added_tokens(TokenizerJson& out, const JsonFile& f, const json& spec) {
  auto it = spec.find("added_tokens");
  if (it == spec.end() || it->is_null()) return;
  if (!it->is_array()) f.refuse_at("added_tokens", "is not a list");
  std::unordered_set<int64_t> ids;
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
    if (!ids.insert(a.id).second) f.refuse_at(jp + ".id", "repeats id " + std::to_string(a.id));
    out.added.push_back(std::move(a));
  }
}

void parse_normalizer(TokenizerJson& out, const JsonFile& f, const json& n, const std::string& jp) {
  if (n.is_null()) return;
  const std::string type = f.type_of(n, jp);
  if (type == "NFC") {
    out.nfc = true;
  } else if (type == "Sequence") {
    const json& list = f.member(n, "normalizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".normalizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(out, f, list[i], jp + ".normalizers[" + std::to_string(i) + "]");
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (null, NFC or a Sequence of NFC)");
  }
}

void parse_pre_tokenizer(TokenizerJson& out, const JsonFile& f, const json& p, const std::string& jp) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  if (type == "Sequence") {
    const json& list = f.member(p, "pretokenizers", jp);
    if (!list.is_array()) f.refuse_at(jp + ".pretokenizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(out, f, list[i], jp + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    PreTokenizerStep s{PreTokenizerStep::Kind::ByteLevel, nullptr, {}, SplitBehavior::Isolated, false, false};
    s.add_prefix_space = f.flag(p, "add_prefix_space", true, jp);
    if (f.flag(p, "use_regex", true, jp)) s.regex = std::make_shared<const Regex>(kGpt2Pattern, f.path);
    out.pre_steps.push_back(std::move(s));
  } else if (type == "Split") {
    PreTokenizerStep s{PreTokenizerStep::Kind::Split, nullptr, {}, SplitBehavior::Isolated, false, false};
    const json& pat = f.member(p, "pattern", jp);
    if (pat.is_object() && pat.contains("Regex")) {
      s.regex = std::make_shared<const Regex>(f.string_at(pat["Regex"], jp + ".pattern.Regex"),
                                              f.path + ": " + jp + ".pattern.Regex");
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
    out.pre_steps.push_back(std::move(s));
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, Split or a Sequence of them)");
  }
}

void parse_post_processor(TokenizerJson& out, const JsonFile& f, const json& p, const std::string& jp) {
  if (p.is_null()) return;
  const std::string type = f.type_of(p, jp);
  if (type == "ByteLevel") return;  // it only trims offsets, which quartet does not report
  if (type == "Sequence") {
    const json& list = f.member(p, "processors", jp);
    if (!list.is_array()) f.refuse_at(jp + ".processors", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(out, f, list[i], jp + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel, TemplateProcessing or a Sequence of them)");
  if (!out.template_before.empty() || !out.template_after.empty())
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
      auto& dst = seen_sequence ? out.template_after : out.template_before;
      for (size_t k = 0; k < ids.size(); ++k)
        dst.push_back(f.id_at(ids[k], jp + ".special_tokens['" + name + "'].ids[" + std::to_string(k) + "]"));
    } else {
      f.refuse_at(ip, "is neither a Sequence nor a SpecialToken");
    }
  }
  if (!seen_sequence) f.refuse_at(jp + ".single", "has no sequence $A");
  // The tokenizer file itself says which token starts every text (Llama-3's <|begin_of_text|>).
  if (out.template_before.size() == 1) out.bos_id = out.template_before[0];
}

void parse_decoder(TokenizerJson& out, const JsonFile& f, const json& d, const std::string& jp) {
  if (d.is_null()) return;
  const std::string type = f.type_of(d, jp);
  if (type == "ByteLevel") {
    out.byte_level_decoder = true;
  } else if (type == "Sequence") {
    const json& list = f.member(d, "decoders", jp);
    if (!list.is_array()) f.refuse_at(jp + ".decoders", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(out, f, list[i], jp + ".decoders[" + std::to_string(i) + "]");
  } else {
    f.refuse_at(jp + ".type", "'" + type + "' is not supported (ByteLevel or a Sequence of it)");
  }
}

// HF's AddedVocabulary::find_matches, including its quirks: a match rejected by single_word is

void read_spec(TokenizerJson& out, const json& spec) {
  const JsonFile f{out.path};
  if (!spec.is_object()) f.refuse_at("(root)", "is not a JSON object");
  // The order matters: the model's vocabulary must exist before added tokens and templates are
  // checked against it.
  parse_model(out, f, f.member(spec, "model", "(root)"));
  parse_added_tokens(out, f, spec);
  auto get = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = spec.find(key);
    return it == spec.end() ? null_value : *it;
  };
  parse_normalizer(out, f, get("normalizer"), "normalizer");
  parse_pre_tokenizer(out, f, get("pre_tokenizer"), "pre_tokenizer");
  parse_post_processor(out, f, get("post_processor"), "post_processor");
  parse_decoder(out, f, get("decoder"), "decoder");
  // Truncation and padding are per-call settings of HF's encode_batch; quartet pads and truncates
  // where it batches, so they are ignored here.
}

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  TokenizerJson out;
  out.path = path;
  try {
    read_spec(out, read_json(path));
  } catch (const json::exception& e) {  // a value of the wrong JSON type somewhere
    fail(__FILE__, __LINE__, path + ": " + e.what());
  }
  return out;
}

}  // namespace quartet
