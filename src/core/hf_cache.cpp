#include "quartet/core/hf_cache.hpp"

#include <cstdlib>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"

namespace quartet {

namespace {

const std::string kPrefix = "hf:";

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

// A Hub repository id: NAME or ORG/NAME, each part of letters, digits, '-', '_' and '.'.
bool is_repo_id(const std::string& id) {
  const size_t slash = id.find('/');
  if (slash != std::string::npos && id.find('/', slash + 1) != std::string::npos) return false;
  if (id.empty() || slash == 0 || slash + 1 == id.size()) return false;
  for (char c : id)
    if (c != '/' && !is_name_char(c)) return false;
  return id.find("..") == std::string::npos;
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "a, b, c" of up to `most` names, with the count of the rest.
std::string listing(const std::vector<std::string>& names, size_t most = 8) {
  if (names.empty()) return "nothing";
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > most) out += " and " + std::to_string(names.size() - most) + " more";
  return out;
}

// The repositories a cache holds, as ORG/NAME.
std::vector<std::string> cached_models(const std::string& cache) {
  std::vector<std::string> out;
  for (const std::string& entry : list_directory(cache)) {
    if (entry.rfind("models--", 0) != 0) continue;
    std::string id = entry.substr(8);
    const size_t sep = id.find("--");
    if (sep != std::string::npos) id.replace(sep, 2, "/");
    out.push_back(id);
  }
  return out;
}

// The names under refs/ (branches and tags; "refs/pr/1" style names sit one folder deeper).
std::vector<std::string> cached_refs(const std::string& refs) {
  std::vector<std::string> out;
  if (!is_directory(refs)) return out;
  for (const std::string& name : list_directory(refs)) {
    if (is_regular_file(refs + "/" + name)) {
      out.push_back(name);
    } else if (is_directory(refs + "/" + name)) {
      for (const std::string& sub : cached_refs(refs + "/" + name)) out.push_back(name + "/" + sub);
    }
  }
  return out;
}

}  // namespace

bool is_hf_path(const std::string& path) { return path.rfind(kPrefix, 0) == 0; }

std::string default_hub_cache(std::string* where) {
  auto take = [&](const std::string& dir, const std::string& why) {
    if (where) *where = why;
    return strip_trailing_slashes(dir);
  };
  if (!env("HF_HUB_CACHE").empty()) return take(env("HF_HUB_CACHE"), "$HF_HUB_CACHE");
  if (!env("HF_HOME").empty()) return take(env("HF_HOME") + "/hub", "$HF_HOME/hub");
  if (!env("XDG_CACHE_HOME").empty())
    return take(env("XDG_CACHE_HOME") + "/huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub");
  return take(env("HOME") + "/.cache/huggingface/hub", "the default, ~/.cache/huggingface/hub");
}

std::string resolve_hf_path(const std::string& path, const std::string& cache_given) {
  QUARTET_CHECK(is_hf_path(path), "'" + path + "' is not an hf:ORG/NAME[@REVISION] path");
  const std::string spec = path.substr(kPrefix.size());
  const size_t at = spec.find('@');
  const std::string repo = spec.substr(0, at);
  const std::string revision = at == std::string::npos ? "main" : spec.substr(at + 1);
  QUARTET_CHECK(is_repo_id(repo), "'" + path + "': '" + repo +
                                      "' is not a Hub model id (ORG/NAME or NAME: letters, digits, '-', '_', '.')");
  QUARTET_CHECK(!revision.empty() && revision.find("..") == std::string::npos && revision[0] != '/',
                "'" + path + "': the revision after '@' is empty or not a plain name");

  std::string where = "model.hub_cache";
  const std::string cache = cache_given.empty() ? default_hub_cache(&where) : strip_trailing_slashes(cache_given);
  const std::string offline =
      "; quartet never downloads: fetch it where there is internet (`hf download " + repo +
      "`, or huggingface_hub's snapshot_download) and copy the hub cache, or give the directory itself";
  QUARTET_CHECK(is_directory(cache),
                "'" + path + "': the Hugging Face hub cache " + cache + " (" + where + ") does not exist" + offline);

  std::string folder = "models--" + repo;
  const size_t slash = folder.find('/');
  if (slash != std::string::npos) folder.replace(slash, 1, "--");
  const std::string model_dir = cache + "/" + folder;
  QUARTET_CHECK(is_directory(model_dir), "'" + path + "': " + cache + " (" + where + ") has no " + folder +
                                             " (it holds " + listing(cached_models(cache)) + ")" + offline);

  std::string commit = revision;
  if (!is_commit_hash(revision)) {
    const std::string ref = model_dir + "/refs/" + revision;
    QUARTET_CHECK(is_regular_file(ref), "'" + path + "': revision '" + revision + "' is not in " + model_dir +
                                            "/refs (it holds " + listing(cached_refs(model_dir + "/refs")) +
                                            "); give one of those or a commit hash after '@'");
    commit = trim(read_file(ref));
    QUARTET_CHECK(is_commit_hash(commit), ref + ": '" + commit + "' is not a commit hash (a damaged cache?)");
  }
  const std::string snapshot = model_dir + "/snapshots/" + commit;
  std::vector<std::string> snapshots;
  if (is_directory(model_dir + "/snapshots")) snapshots = list_directory(model_dir + "/snapshots");
  QUARTET_CHECK(is_directory(snapshot), "'" + path + "': no snapshot " + commit + " in " + model_dir +
                                            "/snapshots (it holds " + listing(snapshots) + ")");
  QUARTET_CHECK(is_regular_file(snapshot + "/config.json"),
                "'" + path + "': the snapshot " + snapshot +
                    " has no config.json (an incomplete download, or one of only some files?)");
  return snapshot;
}

}  // namespace quartet
