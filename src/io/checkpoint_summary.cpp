#include "quartet/io/checkpoint_summary.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "quartet/io/checkpoint_identity.hpp"
#include "quartet/io/sharded_h5.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

bool has_manifest(const std::string& dir) { return is_regular_file(dir + "/manifest.json"); }

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

// A manifest value as text whatever its JSON type ("?" when absent): the summary reports what
// is there and never refuses a manifest for a field it only displays.
std::string text_of(const json& obj, const char* key) {
  if (!obj.is_object()) return "?";
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "?";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// The problems verify_checkpoint lists for one file name "step_N/<file>: ...".
bool mentions_file(const std::vector<std::string>& problems, const std::string& file) {
  const std::string needle = "/" + file + ":";
  return std::any_of(problems.begin(), problems.end(),
                     [&](const std::string& p) { return p.find(needle) != std::string::npos; });
}

// The damage that sizes alone reveal (no checksums): a malformed manifest, a missing, truncated
// or grown file. "" when the sizes are right. Listing many steps must not read every byte of
// every one of them; the step shown in detail is verified in full.
std::string size_problem(const std::string& step) {
  Manifest m;
  try {
    m = read_manifest(step);
  } catch (const Error& e) {
    return std::string("manifest.json: ") + e.what();
  }
  for (const ManifestFile& f : m.files) {
    struct stat st {};
    if (::stat((step + "/" + f.name).c_str(), &st) != 0) return f.name + " is missing";
    if (static_cast<int64_t>(st.st_size) != f.bytes)
      return f.name + " has " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(f.bytes);
  }
  return "";
}

}  // namespace

PathKind classify_checkpoint_path(const std::string& path, std::string* resolved) {
  const std::string p = strip_trailing_slashes(path);
  *resolved = p;
  if (!is_directory(p)) return PathKind::none;
  if (has_manifest(p) || parse_step_name(base_name(p)) || base_name(p) == "latest") return PathKind::step;
  if (is_directory(p + "/checkpoints")) {
    *resolved = p + "/checkpoints";
    return PathKind::checkpoints;
  }
  for (const std::string& name : list_directory(p))
    if (name == "latest" || (parse_step_name(name) && is_directory(p + "/" + name))) return PathKind::checkpoints;
  return PathKind::none;
}

std::vector<StepEntry> list_steps(const std::string& checkpoints_directory) {
  const std::string cdir = strip_trailing_slashes(checkpoints_directory);
  std::vector<StepEntry> steps;
  for (const std::string& name : list_directory(cdir)) {
    const auto n = parse_step_name(name);
    if (!n || !is_directory(cdir + "/" + name)) continue;
    steps.push_back({*n, cdir + "/" + name, has_manifest(cdir + "/" + name)});
  }
  std::sort(steps.begin(), steps.end(), [](const StepEntry& a, const StepEntry& b) { return a.iteration < b.iteration; });
  return steps;
}

std::string latest_name(const std::string& checkpoints_directory) {
  const std::string link = strip_trailing_slashes(checkpoints_directory) + "/latest";
  char buf[4096];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n < 0) return "";
  return base_name(std::string(buf, static_cast<size_t>(n)));
}

std::string resolve_step_directory(const std::string& path, std::string* how) {
  std::string where;
  const PathKind kind = classify_checkpoint_path(path, &where);
  if (how) how->clear();
  if (kind == PathKind::step) return where;
  if (kind == PathKind::none)
    throw Error(path + (path_exists(path) ? ": not a checkpoint: expected a step_<N> directory (with manifest.json), "
                                            "or a checkpoints/ or run directory holding them"
                                          : ": no such directory"));
  const auto steps = list_steps(where);
  const std::string latest = latest_name(where);
  if (!latest.empty()) {
    if (is_directory(where + "/" + latest)) {
      if (how) *how = "the one " + where + "/latest names";
      return where + "/" + latest;
    }
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (!it->complete) continue;
    if (how)
      *how = latest.empty() ? "the newest complete one (there is no `latest` link)"
                            : "the newest complete one (`latest` names " + latest + ", which does not exist)";
    return it->dir;
  }
  std::string listing;
  for (const auto& s : steps) listing += (listing.empty() ? "" : ", ") + base_name(s.dir) + " (no manifest.json)";
  throw Error(where + ": no complete checkpoint" + (listing.empty() ? " (no step_<N> directories)" : ": " + listing));
}

std::string describe_checkpoint(const std::string& step_directory, bool* intact) {
  const std::string dir = strip_trailing_slashes(step_directory);
  std::ostringstream out;
  // A train checkpoint needs trainer.h5 and the model files its description lists.
  std::vector<std::string> models;
  try {
    models = listed_model_files(read_manifest(dir));
  } catch (const Error&) {  // verification says what is wrong with the manifest
  }
  const std::vector<std::string> problems = verify_checkpoint(dir, MPI_COMM_NULL, train_checkpoint_needs("inspect", models));
  *intact = problems.empty();

  // verify_checkpoint has already said what is wrong with a missing or malformed manifest.
  std::optional<Manifest> manifest;
  try {
    manifest = read_manifest(dir);
  } catch (const Error&) {
  }
  if (!manifest) {
    out << dir << ": quartet checkpoint, INCOMPLETE or unreadable\n";
  } else {
    const Manifest& m = *manifest;
    const json& info = m.info;
    int64_t total = 0;
    for (const auto& f : m.files) total += f.bytes;
    out << dir << ": quartet checkpoint, iteration " << m.iteration << "\n";
    out << "  created:       " << m.created << "\n";
    out << "  run:           " << text_of(info, "run_name") << ", algorithm " << text_of(info, "algorithm") << ", "
        << text_of(info, "world_size") << " ranks\n";
    out << "  software:      quartet " << text_of(info, "version") << ", git commit " << text_of(info, "git_commit") << "\n";
    out << "  placement:     " << text_of(info, "placement") << "\n";
    const json models = info.is_object() && info.contains("models") ? info["models"] : json::object();
    if (!models.is_object() || models.empty()) out << "  models:        none listed\n";
    for (auto it = models.begin(); models.is_object() && it != models.end(); ++it) {
      const json& mi = it.value();
      const std::string file = text_of(mi, "file");
      int64_t bytes = -1;
      for (const auto& f : m.files)
        if (f.name == file) bytes = f.bytes;
      out << "  " << it.key() << ":" << std::string(it.key().size() < 14 ? 14 - it.key().size() : 1, ' ') << file
          << " (" << (bytes >= 0 ? human_bytes(bytes) : std::string("not in the manifest's file list")) << ")\n";
      out << "                 " << text_of(mi, "architecture") << ", " << text_of(mi, "head") << " head, "
          << text_of(mi, "parameters") << " parameters, " << text_of(mi, "dtype") << "\n";
      out << "                 sharded over " << text_of(mi, "group_size") << " rank(s), "
          << text_of(mi, "optimizer_steps") << " optimizer steps\n";
      // Optimizer state is what makes a checkpoint resumable rather than only exportable. The
      // file is opened only when verification found nothing wrong with it: a damaged HDF5
      // file is not worth the risk of reading.
      std::string optimizer;
      if (mentions_file(problems, file) || bytes < 0) {
        optimizer = "not read (the file is damaged or missing)";
      } else {
        try {
          ShardedH5Reader r(dir + "/" + file, MPI_COMM_NULL);
          std::vector<std::string> present, absent;
          for (const char* family : {"master", "exp_avg", "exp_avg_sq"})
            (r.names(std::string("optimizer/") + family).empty() ? absent : present).push_back(family);
          const size_t weights = r.names("model").size();
          if (absent.empty()) optimizer = "present (master, exp_avg, exp_avg_sq)";
          else if (present.empty()) optimizer = "absent (weights only)";
          else {
            optimizer = "partial: lacks";
            for (const auto& a : absent) optimizer += " " + a;
          }
          optimizer += "; " + std::to_string(weights) + " weight tensors";
        } catch (const Error& e) {
          optimizer = std::string("unreadable: ") + e.what();
        }
      }
      out << "                 optimizer state " << optimizer << "\n";
      const std::string source = text_of(mi, "source"), tok = text_of(mi, "tokenizer_dir");
      out << "                 from " << source << ", tokenizer "
          << (tok.empty() ? std::string("built-in (characters)") : tok) << "\n";
    }
    const std::string trainer = text_of(info, "trainer_state");
    if (trainer != "?") {
      int64_t bytes = -1;
      for (const auto& f : m.files)
        if (f.name == trainer) bytes = f.bytes;
      out << "  trainer state: " << trainer << " ("
          << (bytes >= 0 ? human_bytes(bytes) : std::string("not in the manifest's file list")) << ")\n";
    }
    out << "  files:         " << m.files.size() << ", " << total << " bytes (" << human_bytes(total) << ")\n";
  }
  if (problems.empty()) {
    out << "  verification:  intact (every file's size and checksums match the manifest)\n";
  } else {
    out << "  verification:  DAMAGED, " << problems.size() << (problems.size() == 1 ? " problem" : " problems")
        << ":\n";
    for (const auto& p : problems) out << "    " << p << "\n";
  }
  return out.str();
}

std::string describe_checkpoints(const std::string& checkpoints_directory, bool* intact) {
  const std::string cdir = strip_trailing_slashes(checkpoints_directory);
  const auto steps = list_steps(cdir);
  const std::string latest = latest_name(cdir);
  std::ostringstream out;
  out << cdir << ": " << steps.size() << (steps.size() == 1 ? " checkpoint" : " checkpoints")
      << " (sizes checked here; checksums for the one detailed below)\n";
  bool damaged = false;
  for (const auto& s : steps) {
    std::string state;
    if (!s.complete) {
      state = "incomplete (no manifest.json: its write did not finish)";
    } else {
      const std::string problem = size_problem(s.dir);
      // A listing reads no file whole (checkpoints run to terabytes): a byte flipped inside one
      // passes here, and is found when that step is inspected, or resumed from.
      state = problem.empty() ? "complete (sizes match; checksums unread: inspect the step to verify it)"
                              : "DAMAGED: " + problem;
      damaged = damaged || !problem.empty();
    }
    char name[64];
    std::snprintf(name, sizeof name, "%-14s", base_name(s.dir).c_str());
    out << "  " << name << state << (base_name(s.dir) == latest ? "   <- latest" : "") << "\n";
  }
  const bool latest_exists =
      !latest.empty() && std::any_of(steps.begin(), steps.end(), [&](const StepEntry& s) { return base_name(s.dir) == latest; });
  if (latest.empty()) out << "  latest: no `latest` link\n";
  else if (!latest_exists) out << "  latest: names " << latest << ", which is not here\n";

  std::string detail;
  if (latest_exists) {
    detail = cdir + "/" + latest;
  } else {
    for (auto it = steps.rbegin(); it != steps.rend() && detail.empty(); ++it)
      if (it->complete) detail = it->dir;
  }
  if (detail.empty()) {
    out << "no complete checkpoint to describe\n";
    *intact = false;
    return out.str();
  }
  bool ok = false;
  out << "\n" << describe_checkpoint(detail, &ok);
  *intact = ok && !damaged;
  return out.str();
}

}  // namespace quartet
