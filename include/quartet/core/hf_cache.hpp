#pragma once
// Model paths of the form hf:ORG/NAME[@REVISION], found in a local Hugging Face hub cache, the
// layout huggingface_hub writes and clusters copy to nodes without internet:
//   <cache>/models--ORG--NAME/refs/<revision>      a file holding the commit hash
//   <cache>/models--ORG--NAME/snapshots/<commit>/  config.json, *.safetensors, tokenizer.json
// Nothing is ever downloaded.
#include <string>

namespace quartet {

// Whether `path` is written as hf:ORG/NAME[@REVISION].
bool is_hf_path(const std::string& path);

// The hub cache huggingface_hub itself would use: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. `where` is set to the
// variable (or default) that decided it, for error messages.
std::string default_hub_cache(std::string* where = nullptr);

// The snapshot directory of hf:ORG/NAME[@REVISION] (revision: a branch or tag name with a file
// under refs/, or a commit hash; default "main") in `cache` ("" = default_hub_cache()). A
// malformed name, a missing cache, model, revision or snapshot, or a snapshot without
// config.json is a quartet::Error saying what was looked for where and what is there instead.
std::string resolve_hf_path(const std::string& path, const std::string& cache = "");

}  // namespace quartet
