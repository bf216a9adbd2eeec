#include "quartet/model/tokenizer/tokenizer.hpp"

#include <fstream>
#include <memory>

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer/hf_tokenizer.hpp"
#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/tokenizer_json.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// bos/eos/pad from tokenizer_config.json: a token string or {"content": ...}, which must be a
// token of the tokenizer.
void ids_from_tokenizer_config(Tokenizer& tok, const std::string& cfg_path, const std::string& tok_path) {
  const json cfg = read_json(cfg_path);
  const JsonFile f{cfg_path};
  auto take = [&](const char* key, std::optional<int64_t>& slot) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return;
    std::string token = it->is_object() ? f.string_at(f.member(*it, "content", key), std::string(key) + ".content")
                                        : f.string_at(*it, key);
    auto id = tok.token_to_id(token);
    if (!id) f.refuse_at(key, "'" + token + "' is not a token of " + tok_path);
    slot = *id;
  };
  if (cfg.is_object()) {
    take("bos_token", tok.bos_id);
    take("eos_token", tok.eos_id);
    take("pad_token", tok.pad_id);
  }
}

// The ids tokenizer_config.json left open, from config.json's *_token_id.
void ids_from_model_config(Tokenizer& tok, const std::string& model_cfg_path, const std::string& tok_path) {
  const json cfg = read_json(model_cfg_path);
  const JsonFile f{model_cfg_path};
  auto take = [&](const char* key, std::optional<int64_t>& slot) {
    auto it = cfg.find(key);
    if (slot || it == cfg.end() || it->is_null()) return;
    // Llama-3.1 lists several eos ids; the first is the tokenizer's own end of text.
    const json& v = it->is_array() ? (it->empty() ? *it : (*it)[0]) : *it;
    if (v.is_array()) return;
    int64_t id = f.id_at(v, key);
    if (id >= tok.vocab_size())
      f.refuse_at(key, std::to_string(id) + " is beyond the vocabulary of " + tok_path);
    slot = id;
  };
  if (cfg.is_object()) {
    take("bos_token_id", tok.bos_id);
    take("eos_token_id", tok.eos_id);
    take("pad_token_id", tok.pad_id);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<HfTokenizer>(read_tokenizer_json(tokenizer_json_path));
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir) {
  const std::string tok_path = model_dir + "/tokenizer.json";
  if (!file_exists(tok_path))
    fail(__FILE__, __LINE__, model_dir + ": no tokenizer.json (quartet reads only the fast-tokenizer file)");
  auto tok = load_hf_tokenizer(tok_path);
  // tokenizer_config.json is what transformers' tokenizer reports, so it wins; config.json
  // fills in what it leaves open.
  const std::string cfg_path = model_dir + "/tokenizer_config.json";
  if (file_exists(cfg_path)) ids_from_tokenizer_config(*tok, cfg_path, tok_path);
  const std::string model_cfg_path = model_dir + "/config.json";
  if (file_exists(model_cfg_path)) ids_from_model_config(*tok, model_cfg_path, tok_path);
  return tok;
}

}  // namespace quartet
