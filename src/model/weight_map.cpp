#include "quartet/model/weight_map.hpp"

#include <set>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

// Buffers HF checkpoints may carry beside the parameters; they are recomputed, never read.
bool is_known_buffer(const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".attention.bias") ||
         ends(".attention.masked_bias") || ends(".rotary_emb.inv_freq") || ends(".attn.embed_positions");
}

bool is_head_tensor(const std::string& name) {
  for (const char* p : {"lm_head.", "embed_out.", "score.", "classifier."})
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

std::string list_of(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 8) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) { return c10::str(c10::IntArrayRef(shape)); }

}  // namespace

std::string weight_dtype_problem(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: case c10::kHalf: case c10::kBFloat16: case c10::kDouble: return "";
    case c10::kFloat8_e4m3fn: case c10::kFloat8_e5m2:
      return "an 8-bit float: quantized weights need their scales, which quartet does not apply (use a "
             "float16, bfloat16 or float32 checkpoint)";
    case c10::kBool: return "a boolean tensor cannot be a weight";
    default: return std::string("an integer tensor (") + c10::toString(dtype) + ") cannot be a weight";
  }
}

std::string WeightMap::note() const {
  std::string s;
  if (!fresh.empty()) s += "starts " + list_of(fresh) + " fresh (the checkpoint has no such head)";
  if (!unused.empty()) s += std::string(s.empty() ? "" : "; ") + "does not use the checkpoint's " + list_of(unused);
  return s;
}

WeightMap map_weights(const SafetensorsCheckpoint& ckpt, const std::vector<ParamShape>& params,
                      const ModelConfig& config, Head head, HeadSource head_source) {
  const std::string prefix = std::string(config.family == Family::llama      ? "model"
                                         : config.family == Family::gpt_neox ? "gpt_neox"
                                                                             : "transformer") +
                             ".";
  auto candidates = [&](const std::string& name) {
    std::vector<std::string> c{name};
    if (name == "embed_out.weight") c.push_back("lm_head.weight");
    if (name.rfind(prefix, 0) == 0) c.push_back(name.substr(prefix.size()));
    return c;
  };
  auto found_as = [&](const std::string& name) -> std::string {
    for (const auto& n : candidates(name))
      if (ckpt.has(n)) return n;
    return "";
  };
  // The head is read whole or, where allowed, not at all.
  bool head_whole = true;
  for (const auto& p : params)
    if (p.name.rfind(prefix, 0) != 0 && found_as(p.name).empty()) head_whole = false;
  const bool fresh_head = head_source == HeadSource::fresh_if_missing && !head_whole;

  WeightMap map;
  std::vector<std::string> missing, bad;
  std::set<std::string> used;
  for (const auto& p : params) {
    const bool is_head = p.name.rfind(prefix, 0) != 0;
    if (is_head && fresh_head) {
      map.fresh.push_back(p.name);
      continue;
    }
    const std::string n = found_as(p.name);
    if (n.empty()) {
      missing.push_back(p.name);
      continue;
    }
    used.insert(n);
    const auto& e = ckpt.entry(n);
    if (e.shape != p.shape)
      bad.push_back("tensor '" + n + "' has shape " + shape_text(e.shape) + ", the model expects " + shape_text(p.shape));
    const std::string why = weight_dtype_problem(e.dtype);
    if (!why.empty()) bad.push_back("tensor '" + n + "' is " + why);
    map.source[p.name] = n;
  }
  std::vector<std::string> extra;
  for (const auto& n : ckpt.names()) {
    if (used.count(n) || is_known_buffer(n)) continue;
    if (config.tie_word_embeddings && (n == "lm_head.weight" || n == "embed_out.weight")) continue;
    if (is_head_tensor(n) && head_source == HeadSource::fresh_if_missing) {
      map.unused.push_back(n);
      continue;
    }
    extra.push_back(n);
  }
  const std::string model = architecture_name(config, head) + ", " + head_name(head) + " head";
  std::string faults;
  auto add = [&](const std::string& f) { faults += (faults.empty() ? "" : "; ") + f; };
  if (!missing.empty()) {
    const bool head_only = std::all_of(missing.begin(), missing.end(), [&](const std::string& n) { return n.rfind(prefix, 0) != 0; });
    add("tensor" + std::string(missing.size() > 1 ? "s " : " ") + list_of(missing) +
        (missing.size() > 1 ? " are" : " is") + " missing (" + model + ")" +
        (head_only ? ": a directory without this head is not a " + std::string(head_name(head)) + " model" : ""));
  }
  for (size_t i = 0; i < bad.size() && i < 8; ++i) add(bad[i]);
  if (bad.size() > 8) add("and " + std::to_string(bad.size() - 8) + " more tensors of the wrong shape or dtype");
  if (!extra.empty()) add("tensors the " + model + " model does not have: " + list_of(extra));
  QUARTET_CHECK(faults.empty(), ckpt.dir() + ": " + faults);
  return map;
}

WeightMap map_weights(const SafetensorsCheckpoint& ckpt, const ModelConfig& config, Head head,
                      HeadSource head_source) {
  Transformer probe(config, head, torch::TensorOptions().device(torch::kMeta), /*random_init=*/false);
  std::vector<ParamShape> params;
  for (const auto& item : probe->named_parameters(true)) params.push_back({item.key(), item.value().sizes().vec()});
  return map_weights(ckpt, params, config, head, head_source);
}

}  // namespace quartet
