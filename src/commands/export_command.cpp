#include "quartet/commands/export_command.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "quartet/core/check.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/units.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "quartet/io/checkpoint_identity.hpp"
#include "quartet/io/checkpoint_summary.hpp"
#include "quartet/io/sharded_h5.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"
#include "quartet/model/transformer.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

// Tokenizer files of a Hugging Face directory that travel with the model: the fast tokenizer
// (the one quartet reads), what transformers reads beside it, and the generation defaults.
const char* const kTokenizerFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                       "added_tokens.json",  "vocab.json",            "merges.txt",
                                       "tokenizer.model",    "chat_template.jinja",   "chat_template.json",
                                       "generation_config.json"};

torch::ScalarType dtype_of(const std::string& name, const std::string& what) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  throw Error(what + " is '" + name + "'; expected float32, bfloat16 or float16");
}

// One model of the manifest's info.models, every field export needs, each named on error.
struct ModelEntry {
  std::string file, architecture, head, dtype, config_json, tokenizer_dir;
};

std::string string_member(const json& obj, const std::string& where, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    throw Error(where + "." + key + (it == obj.end() ? " is missing" : " is not a string"));
  return it->get<std::string>();
}

ModelEntry model_entry(const Manifest& m, const std::string& step, const std::string& role) {
  const std::string manifest = step + "/manifest.json";
  const json& info = m.info;
  if (!info.is_object() || !info.contains("models") || !info["models"].is_object())
    throw Error(manifest + ": info.models is missing: this checkpoint does not say which models it holds");
  const json& models = info["models"];
  if (!models.contains(role)) {
    std::string roles;
    for (auto it = models.begin(); it != models.end(); ++it) roles += (roles.empty() ? "" : ", ") + it.key();
    throw Error(manifest + ": this checkpoint has no " + role + "; it holds " +
                (roles.empty() ? std::string("no models") : roles + " (choose one with --role)"));
  }
  const json& e = models[role];
  const std::string where = manifest + ": info.models." + role;
  if (!e.is_object()) throw Error(where + " is not an object");
  ModelEntry out;
  out.file = string_member(e, where, "file");
  out.architecture = string_member(e, where, "architecture");
  out.head = string_member(e, where, "head");
  out.dtype = string_member(e, where, "dtype");
  out.config_json = string_member(e, where, "config_json");
  out.tokenizer_dir = string_member(e, where, "tokenizer_dir");
  return out;
}

// Without --role: the checkpoint's one model (an rm checkpoint's reward model, an sft one's
// actor), else the actor (train's checkpoints hold the actor and the critic).
std::string default_role(const Manifest& m) {
  const json& info = m.info;
  if (info.is_object() && info.contains("models") && info["models"].is_object() && info["models"].size() == 1)
    return info["models"].begin().key();
  return "actor";
}

Head head_named(const std::string& name, const std::string& where) {
  for (Head h : {Head::causal_lm, Head::token_value, Head::sequence_reward})
    if (name == head_name(h)) return h;
  throw Error(where + " is '" + name + "'; expected causal_lm, token_value or sequence_reward");
}

// --shard-size as transformers reads max_shard_size: "5GB" is 5 * 10^9 bytes, "5GiB" 5 * 2^30.
uint64_t shard_size_of(const CommandLine& cl) {
  if (!cl.has("shard-size")) return 5000000000ull;
  const std::string& text = cl.options.at("shard-size");
  uint64_t bytes = 0;
  try {
    bytes = parse_bytes(text);
  } catch (const std::invalid_argument&) {
    bytes = 0;
  }
  if (bytes == 0)
    throw Error("--shard-size '" + text + "' is not a size: write a positive number of bytes with an optional unit "
                "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 5GB");
  return bytes;
}

struct Planned {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// The export proper, into `tmp` (a fresh directory). Returns the lines of the report.
std::vector<std::string> write_export(const std::string& step, const std::string& role, const ModelEntry& e,
                                      torch::ScalarType out_dtype, uint64_t shard_bytes, const std::string& tmp,
                                      int64_t* parameters) {
  const std::string file = step + "/" + e.file;
  const std::string cfg_where = step + "/manifest.json: info.models." + role + ".config_json";
  const ModelConfig config = ModelConfig::from_json_text(e.config_json, cfg_where);
  const Head head = head_named(e.head, step + "/manifest.json: info.models." + role + ".head");

  ShardedH5Reader reader(file, MPI_COMM_NULL);
  // The file says whose it is; a checkpoint whose files were swapped or renamed is refused
  // rather than exported under the wrong role.
  std::string file_role;
  try {
    file_role = reader.string_attribute("role");
  } catch (const Error&) {
  }
  if (!file_role.empty() && file_role != role)
    throw Error(file + ": holds the " + file_role + " (root attribute role), but the manifest lists it as the " + role);

  // The tensors the model has, in its own order and under HF names, from the same model built
  // on the meta device (nothing allocated): every one must be in the file with its shape, and
  // nothing else may be.
  Transformer meta(config, head, torch::TensorOptions().device(torch::kMeta).dtype(torch::kFloat32), false);
  std::vector<Planned> plan;
  std::set<std::string> expected;
  const uint64_t elem = static_cast<uint64_t>(c10::elementSize(out_dtype));
  *parameters = 0;
  for (const auto& [name, t] : meta->hf_state()) {
    const std::string ds = "model/" + name;
    if (!reader.has(ds))
      throw Error(file + ": dataset " + ds + " is missing (the " + e.architecture + " of " + cfg_where + " has it)");
    const auto shape = reader.shape(ds);
    if (shape != t.sizes().vec())
      throw Error(file + ": dataset " + ds + " has shape " + c10::str(c10::IntArrayRef(shape)) + ", the " +
                  e.architecture + " of " + cfg_where + " expects " + c10::str(t.sizes()));
    plan.push_back({name, shape, static_cast<uint64_t>(t.numel()) * elem});
    expected.insert(name);
    *parameters += t.numel();
  }
  for (const auto& name : reader.names("model"))
    if (!expected.count(name))
      throw Error(file + ": dataset model/" + name + " is not a parameter of the " + e.architecture + " of " + cfg_where);

  // HF's greedy split (as save_safetensors_checkpoint makes it), planned from the shapes alone
  // so that each shard's tensors are read, written and freed before the next: the export holds
  // one shard in memory (at most --shard-size, or one tensor larger than it), not the model.
  std::vector<std::vector<const Planned*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const Planned& p : plan) {
    if (!shards.back().empty() && in_shard + p.bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&p);
    in_shard += p.bytes;
    total += p.bytes;
  }
  std::vector<std::string> report;
  const std::map<std::string, std::string> meta_pt = {{"format", "pt"}};  // transformers requires it
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    NamedTensors tensors;
    for (const Planned* p : shards[i]) {
      tensors.emplace_back(p->name, reader.read("model/" + p->name).to(out_dtype).contiguous());
      weight_map[p->name] = name;
    }
    save_safetensors(tmp + "/" + name, tensors, meta_pt);
    report.push_back(std::string(name) + ": " + std::to_string(tensors.size()) + " tensors");
  }
  if (shards.size() > 1) {
    write_text_atomically(tmp + "/model.safetensors.index.json",
                          json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
    report.push_back("model.safetensors.index.json");
  }

  write_text_atomically(tmp + "/config.json", config.to_json(e.architecture, dtype_name(out_dtype)));
  report.push_back("config.json: " + e.architecture + ", " + dtype_name(out_dtype));
  if (e.architecture == "GPTJForTokenClassification")
    report.push_back("note: transformers has no GPTJForTokenClassification; quartet loads this critic, HF does not");

  if (e.tokenizer_dir.empty()) {
    write_builtin_tokenizer_files(tmp, config.max_positions);
    report.push_back("tokenizer.json, tokenizer_config.json, special_tokens_map.json: quartet's built-in "
                     "character tokenizer");
    if (config.vocab_size != builtin_vocab_size())
      report.push_back("note: the model has " + std::to_string(config.vocab_size) + " token ids, the built-in tokenizer " +
                       std::to_string(builtin_vocab_size()) + " (as the run had them)");
  } else {
    const std::string src = strip_trailing_slashes(e.tokenizer_dir);
    if (!is_regular_file(src + "/tokenizer.json"))
      throw Error(src + "/tokenizer.json: not there (info.models." + role +
                  ".tokenizer_dir of the checkpoint names this directory; the export needs its tokenizer files)");
    std::string copied;
    for (const char* name : kTokenizerFiles) {
      const std::string from = src + "/" + name;
      if (!is_regular_file(from)) continue;
      write_text_atomically(tmp + "/" + name, read_file(from));
      copied += (copied.empty() ? "" : ", ") + std::string(name);
    }
    report.push_back(copied + ": copied from " + src);
  }
  return report;
}

}  // namespace

int run_export(const CommandLine& cl) {
  // Everything that can be refused without reading the checkpoint is refused first.
  if (!cl.has("out") || cl.options.at("out").empty())
    throw Error("--out DIR is required: the directory to write the Hugging Face model into");
  const std::string out = strip_trailing_slashes(cl.options.at("out"));
  const uint64_t shard_bytes = shard_size_of(cl);
  if (path_exists(out)) {
    if (!is_directory(out)) throw Error(out + ": exists and is not a directory (--out names the directory to write)");
    if (!list_directory(out).empty())
      throw Error(out + ": exists and is not empty; quartet export writes a new directory (remove it or choose "
                        "another --out)");
  }

  std::string how;
  const std::string step = resolve_step_directory(cl.operand, &how);
  // The model files the manifest describes (a role it lacks is refused below, naming the ones it has).
  std::vector<std::string> models;
  try {
    models = listed_model_files(read_manifest(step));
  } catch (const Error&) {  // verification says what is wrong with the manifest
  }
  const std::vector<std::string> problems = verify_checkpoint(step, MPI_COMM_NULL, train_checkpoint_needs("export", models));
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += "\n  " + p;
    // Another complete step may be what the user wants instead; verifying those too would
    // read them all, so they are only named.
    std::string others;
    std::string parent = parent_directory(step);
    for (const auto& s : list_steps(parent))
      if (s.complete && s.dir != step) others += (others.empty() ? "" : ", ") + base_name(s.dir);
    throw Error(step + (how.empty() ? "" : " (" + how + ")") +
                ": the checkpoint is damaged or incomplete, refusing to export it:" + all +
                (others.empty() ? "" : "\n(other complete checkpoints beside it: " + others +
                                           "; name one's directory to export it)"));
  }
  const Manifest manifest = read_manifest(step);
  const std::string role = cl.has("role") ? cl.options.at("role") : default_role(manifest);
  const ModelEntry entry = model_entry(manifest, step, role);
  const torch::ScalarType out_dtype =
      cl.has("dtype") ? dtype_of(cl.options.at("dtype"), "--dtype")
                      : dtype_of(entry.dtype, step + "/manifest.json: info.models." + role + ".dtype");
  std::printf("export: %s, iteration %lld%s\n", step.c_str(), static_cast<long long>(manifest.iteration),
              how.empty() ? "" : (" (" + how + ")").c_str());
  std::printf("export: the %s, %s, verified intact\n", role.c_str(), entry.architecture.c_str());
  std::fflush(stdout);

  // Written beside --out under a name that is clearly not it, then renamed into place: a crash
  // leaves DIR.tmp-<pid>, never a directory named DIR that looks complete.
  make_directories(parent_directory(out));
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  remove_tree(tmp);
  make_directories(tmp);
  std::vector<std::string> report;
  int64_t parameters = 0;
  try {
    report = write_export(step, role, entry, out_dtype, shard_bytes, tmp, &parameters);
    fsync_directory(tmp);
    // rename(2) replaces an empty directory; one that gained files since the check above makes
    // it fail (ENOTEMPTY), and nothing of the user's is touched.
    if (::rename(tmp.c_str(), out.c_str()) != 0)
      throw Error("cannot rename " + tmp + " to " + out + ": " + std::strerror(errno));
    fsync_directory(parent_directory(out));
  } catch (...) {
    try {
      remove_tree(tmp);
    } catch (const std::exception&) {
    }
    throw;
  }

  int64_t bytes = 0;
  const auto files = list_directory(out);
  for (const auto& line : report) std::printf("  %s\n", line.c_str());
  for (const auto& f : files) {
    struct stat st {};
    if (::stat((out + "/" + f).c_str(), &st) == 0) bytes += static_cast<int64_t>(st.st_size);
  }
  std::printf("export: wrote %zu files, %lld bytes, %lld parameters in %s -> %s\n", files.size(),
              static_cast<long long>(bytes), static_cast<long long>(parameters), dtype_name(out_dtype).c_str(), out.c_str());
  return 0;
}

}  // namespace quartet
