#include "quartet/model/tokenizer/tokenizer_json.hpp"

#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/utf8.hpp"

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
      f.refuse_at(std::string("model.") + key, "is not supported (neither byte-level nor SentencePiece BPE has one)");
  }

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
    if (e.is_string()) {  // "a b": neither byte-level nor SentencePiece tokens contain a space
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
  BpeModel::Options options;
  auto u = m.find("unk_token");
  if (u != m.end() && !u->is_null()) options.unk_token = f.string_at(*u, "model.unk_token");
  options.ignore_merges = f.flag(m, "ignore_merges", false, "model");
  options.fuse_unk = f.flag(m, "fuse_unk", false, "model");
  options.byte_fallback = f.flag(m, "byte_fallback", false, "model");
  out.bpe = std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), f.path);
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
  out.normalizer = read_normalizer(f, get("normalizer"), "normalizer");
  out.pre_steps = read_pre_tokenizer(f, get("pre_tokenizer"), "pre_tokenizer");
  out.post = read_post_processor(f, get("post_processor"), "post_processor");
  // The tokenizer file itself says which token starts every text (Llama's <s>).
  if (out.post.before.size() == 1) out.bos_id = out.post.before[0];
  out.decoder = read_decoder(f, get("decoder"), "decoder");
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
