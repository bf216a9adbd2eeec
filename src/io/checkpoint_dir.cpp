#include "quartet/io/checkpoint_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>
#include <stdexcept>

#include "quartet/core/check.hpp"
#include "quartet/core/utc_time.hpp"
#include "quartet/core/files.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "quartet checkpoint";
constexpr int64_t kVersion = 1;
constexpr const char* kChecksumName = "xxh3-64";
constexpr const char* kManifestName = "manifest.json";
// pread size: large enough that system calls cost nothing next to the copy and the hash (and
// above the usual 1 MiB stripe of parallel file systems), small enough to stay in a core's L2,
// so the hash reads what pread just wrote from cache. Reading from the page cache is copy-bound
// (~5 GB/s a core here); 1 to 8 MiB measured the same within noise.
constexpr int64_t kReadBytes = 2ll << 20;
// Corrupt ranges named per file; a file that is garbage throughout would otherwise give a
// problem per 64 MiB.
constexpr int kRangesPerFile = 3;
// A chunk's read status beside errno values: the file was shorter than its recorded size.
constexpr int kEndedEarly = INT_MAX;

// ----- this process, or the ranks of comm (MPI_COMM_NULL: this process alone, no MPI calls) -----

int rank_of(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return 0;
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int size_of(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return 1;
  int n = 1;
  MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

void bcast_string(std::string* s, int root, MPI_Comm comm) {
  if (comm != MPI_COMM_NULL) watched::bcast_text(s, root, comm, "a checkpoint message");
}

// The message of whatever f throws, "" when it returns: work done on one rank (or a part of the
// work done on each) must not throw past the collective calls the other ranks are waiting in.
template <class F>
std::string capture(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "checkpoint: unknown exception";
  }
  return "";
}

// Collective: when any rank has an error, every rank throws the lowest such rank's message word
// for word (it names that rank), so a failure on rank 0 ends the call everywhere alike.
void throw_if_any(const std::string& mine, MPI_Comm comm) {
  std::string error = mine;
  if (comm != MPI_COMM_NULL) {
    const int size = size_of(comm);
    int who = mine.empty() ? size : rank_of(comm);
    watched::allreduce(MPI_IN_PLACE, &who, 1, MPI_INT, MPI_MIN, comm, "which rank has a checkpoint error");
    if (who == size) return;
    bcast_string(&error, who, comm);
  }
  if (!error.empty()) throw Error(error);
}

// ----- names -----


// "" when `name` may be listed in a manifest: relative, inside the step directory, not the
// manifest itself.
std::string bad_file_name(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name[0] == '/') return "is absolute (names are relative to the step directory)";
  if (name == kManifestName) return "is the manifest's own name";
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return "has an empty, '.' or '..' component (names stay inside the step directory)";
    start = end + 1;
  }
  return "";
}

// The step that `latest` names ("" when there is no such link).
std::string latest_target(const std::string& out) {
  const std::string link = checkpoints_dir(out) + "/latest";
  char buf[4096];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n < 0) return "";
  return base_name(std::string(buf, static_cast<size_t>(n)));
}

int64_t chunks_of(int64_t bytes, int64_t chunk_bytes) { return bytes <= 0 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes; }

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// ----- the manifest -----

// What is wrong with a manifest, without the file's name (the callers add it).
struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

bool is_int64(const json& v) {
  return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
}

const json& field(const json& obj, const std::string& where, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw Malformed(where + key + ": missing");
  return *it;
}

int64_t int_field(const json& obj, const std::string& where, const char* key, int64_t min, const char* expected) {
  const json& v = field(obj, where, key);
  if (!is_int64(v) || v.get<int64_t>() < min)
    throw Malformed(where + key + ": expected " + expected + ", found " + shown(v));
  return v.get<int64_t>();
}

std::string string_field(const json& obj, const std::string& where, const char* key) {
  const json& v = field(obj, where, key);
  if (!v.is_string()) throw Malformed(where + key + ": expected a string, found " + shown(v));
  return v.get<std::string>();
}

Manifest parse_manifest(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Malformed(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw Malformed("expected a JSON object, found " + shown(j));
  const std::string format = string_field(j, "", "format");
  if (format != kFormat)
    throw Malformed("format: expected \"" + std::string(kFormat) + "\", found " + shown(j["format"]));
  const int64_t version = int_field(j, "", "version", 0, "an integer");
  if (version != kVersion)
    throw Malformed("version: this build reads version " + std::to_string(kVersion) + ", found " +
                    std::to_string(version));
  Manifest m;
  m.iteration = int_field(j, "", "iteration", 0, "a non-negative integer");
  m.created = string_field(j, "", "created");
  const std::string checksum = string_field(j, "", "checksum");
  if (checksum != kChecksumName)
    throw Malformed("checksum: expected \"" + std::string(kChecksumName) + "\", found " + shown(j["checksum"]));
  m.chunk_bytes = int_field(j, "", "chunk_bytes", 1, "a positive integer");
  const json& files = field(j, "", "files");
  if (!files.is_array()) throw Malformed("files: expected an array, found " + shown(files));
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string where = "files[" + std::to_string(i) + "].";
    const json& f = files[i];
    if (!f.is_object()) throw Malformed("files[" + std::to_string(i) + "]: expected an object, found " + shown(f));
    ManifestFile mf;
    mf.name = string_field(f, where, "name");
    const std::string bad = bad_file_name(mf.name);
    if (!bad.empty()) throw Malformed(where + "name: \"" + mf.name + "\" " + bad);
    if (!seen.insert(mf.name).second) throw Malformed(where + "name: \"" + mf.name + "\" is listed twice");
    mf.bytes = int_field(f, where, "bytes", 0, "a non-negative integer");
    const json& sums = field(f, where, "xxh3");
    if (!sums.is_array()) throw Malformed(where + "xxh3: expected an array, found " + shown(sums));
    const int64_t want = chunks_of(mf.bytes, m.chunk_bytes);
    if (static_cast<int64_t>(sums.size()) != want)
      throw Malformed(where + "xxh3: " + std::to_string(sums.size()) + " checksums, but " +
                      std::to_string(mf.bytes) + " bytes in chunks of " + std::to_string(m.chunk_bytes) +
                      " make " + std::to_string(want));
    for (size_t k = 0; k < sums.size(); ++k) {
      const json& s = sums[k];
      const std::string h = s.is_string() ? s.get<std::string>() : "";
      if (h.size() != 16 || !std::all_of(h.begin(), h.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
        throw Malformed(where + "xxh3[" + std::to_string(k) + "]: expected 16 hex digits, found " + shown(s));
      mf.chunks.push_back(std::stoull(h, nullptr, 16));
    }
    m.files.push_back(std::move(mf));
  }
  m.info = j.contains("info") ? j["info"] : json::object();
  return m;
}

json manifest_json(const Manifest& m) {
  json files = json::array();
  for (const ManifestFile& f : m.files) {
    json sums = json::array();
    for (uint64_t h : f.chunks) sums.push_back(hex16(h));
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", sums}});
  }
  return {{"format", kFormat}, {"version", kVersion},        {"iteration", m.iteration},
          {"created", m.created}, {"checksum", kChecksumName}, {"chunk_bytes", m.chunk_bytes},
          {"files", files},     {"info", m.info}};
}

// ----- checksums -----

// Per chunk, over every file's chunks numbered one after the other: its XXH3-64 and its read
// status (0, an errno value or kEndedEarly), the same arrays on every rank.
struct ChunkSums {
  std::vector<uint64_t> hash;
  std::vector<int> status;
  std::vector<int64_t> first;  // each file's first chunk
};

std::string status_text(int status) {
  return status == kEndedEarly ? "the file ended early (it changed while being read)" : std::strerror(status);
}

// Collective: chunk g of the files is read by rank g % size, so every rank reads about the same
// amount and a large file is read by all of them. bytes[f] < 0: file f is not read (no chunks).
ChunkSums checksum_chunks(const std::vector<std::string>& paths, const std::vector<int64_t>& bytes,
                          int64_t chunk_bytes, MPI_Comm comm) {
  const int rank = rank_of(comm), size = size_of(comm);
  ChunkSums sums;
  int64_t total = 0;
  for (int64_t b : bytes) {
    sums.first.push_back(total);
    total += chunks_of(b, chunk_bytes);
  }
  QUARTET_CHECK(total <= INT_MAX, "checkpoint: " + std::to_string(total) + " checksum chunks are too many");
  sums.hash.assign(static_cast<size_t>(total), 0);
  sums.status.assign(static_cast<size_t>(total), 0);
  // Read failures go into `status`; only what cannot be described per chunk (memory) is an error.
  const std::string error = capture([&] {
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), XXH3_freeState);
    QUARTET_CHECK(state != nullptr, "checkpoint: cannot allocate an XXH3 state");
    std::vector<char> buf;
    for (size_t f = 0; f < paths.size(); ++f) {
      const int64_t n = chunks_of(bytes[f], chunk_bytes);
      int fd = -1, open_errno = 0;
      for (int64_t k = 0; k < n; ++k) {
        const size_t g = static_cast<size_t>(sums.first[f] + k);
        if (static_cast<int>(g % static_cast<size_t>(size)) != rank) continue;
        if (fd < 0 && open_errno == 0) {
          fd = ::open(paths[f].c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) open_errno = errno ? errno : EIO;
        }
        if (fd < 0) {
          sums.status[g] = open_errno;
          continue;
        }
        if (buf.empty()) buf.resize(static_cast<size_t>(std::min(kReadBytes, chunk_bytes)));
        const int64_t begin = k * chunk_bytes, end = std::min(bytes[f], begin + chunk_bytes);
        XXH3_64bits_reset(state.get());
        for (int64_t off = begin; off < end;) {
          const size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), end - off));
          const ssize_t got = ::pread(fd, buf.data(), want, off);
          if (got < 0 && errno == EINTR) continue;
          if (got <= 0) {
            sums.status[g] = got == 0 ? kEndedEarly : errno;
            break;
          }
          XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(got));
          off += got;
        }
        if (sums.status[g] == 0) sums.hash[g] = XXH3_64bits_digest(state.get());
      }
      if (fd >= 0) ::close(fd);
    }
  });
  throw_if_any(error, comm);
  // Each chunk was filled in by one rank and is zero elsewhere: OR and MAX combine them exactly.
  if (comm != MPI_COMM_NULL && total > 0) {
    watched::allreduce(MPI_IN_PLACE, sums.hash.data(), static_cast<int>(total), MPI_UINT64_T, MPI_BOR, comm,
                       "the checkpoint's chunk checksums");
    watched::allreduce(MPI_IN_PLACE, sums.status.data(), static_cast<int>(total), MPI_INT, MPI_MAX, comm,
                       "the checkpoint's chunk read statuses");
  }
  return sums;
}

// ----- durability and removal (rank 0) -----

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QUARTET_CHECK(fd >= 0, "cannot open " + path + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const std::string why = rc == 0 ? "" : std::strerror(errno);
  ::close(fd);
  QUARTET_CHECK(rc == 0, "cannot fsync " + path + ": " + why);
}

// Manifest first, made durable, then the rest: a removal cut short by a crash leaves an
// incomplete directory (removed at the next commit), never a complete-looking one with files
// missing that a resume would have to reject.
void remove_checkpoint(const std::string& dir) {
  const std::string manifest = dir + "/" + kManifestName;
  if (::unlink(manifest.c_str()) == 0)
    fsync_directory(dir);
  else
    QUARTET_CHECK(errno == ENOENT || errno == ENOTDIR, "cannot remove " + manifest + ": " + std::strerror(errno));
  remove_tree(dir);
}

void move_latest(const std::string& out, int64_t iteration) {
  const std::string cdir = checkpoints_dir(out), tmp = cdir + "/latest.tmp", link = cdir + "/latest";
  const std::string target = "step_" + std::to_string(iteration);  // relative: the run directory may move
  QUARTET_CHECK(::unlink(tmp.c_str()) == 0 || errno == ENOENT, "cannot remove " + tmp + ": " + std::strerror(errno));
  QUARTET_CHECK(::symlink(target.c_str(), tmp.c_str()) == 0,
                "cannot create symlink " + tmp + " -> " + target + ": " + std::strerror(errno));
  // rename(2) replaces `latest` in one step: a reader sees the old target or the new one.
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(__FILE__, __LINE__, "cannot rename " + tmp + " to " + link + ": " + why);
  }
  fsync_directory(cdir);
}

void apply_retention(const std::string& out, int64_t iteration, int keep, int keep_every) {
  const std::vector<int64_t> steps = list_checkpoint_steps(out);
  const std::optional<int64_t> latest = parse_step_name(latest_target(out));
  std::set<int64_t> kept;
  int newest = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const int64_t s = *it;
    if (!is_regular_file(step_dir(out, s) + "/" + kManifestName)) continue;  // incomplete: goes
    if (s > iteration) kept.insert(s);  // not this run's: left to the user (see the header)
    else if (newest < keep) {
      kept.insert(s);
      ++newest;
    }
    if (keep_every > 0 && s % keep_every == 0) kept.insert(s);
  }
  if (latest) kept.insert(*latest);
  bool removed = false;
  for (int64_t s : steps) {
    if (kept.count(s)) continue;
    remove_checkpoint(step_dir(out, s));
    removed = true;
  }
  if (removed) fsync_directory(checkpoints_dir(out));
}

void commit(const std::string& out, int64_t iteration, const std::vector<std::string>& files, const json& info,
            MPI_Comm comm, int keep, int keep_every, int64_t chunk_bytes) {
  const std::string dir = step_dir(out, iteration);
  // The arguments are the same on every rank, so these fail everywhere alike, before any collective.
  QUARTET_CHECK(iteration >= 0, "commit_checkpoint: iteration " + std::to_string(iteration) + " is negative");
  QUARTET_CHECK(keep >= 1, "commit_checkpoint: keep = " + std::to_string(keep) + ", must be at least 1");
  QUARTET_CHECK(keep_every >= 0, "commit_checkpoint: keep_every = " + std::to_string(keep_every) + ", must be >= 0");
  QUARTET_CHECK(chunk_bytes > 0, "commit_checkpoint: chunk_bytes must be positive");
  std::set<std::string> seen;
  for (const std::string& name : files) {
    const std::string bad = bad_file_name(name);
    QUARTET_CHECK(bad.empty(), "commit_checkpoint " + dir + ": file name \"" + name + "\" " + bad);
    QUARTET_CHECK(seen.insert(name).second, "commit_checkpoint " + dir + ": \"" + name + "\" is listed twice");
  }
  std::vector<std::string> paths;
  for (const std::string& name : files) paths.push_back(dir + "/" + name);

  // Rank 0's sizes serve every rank, so that all number the chunks alike.
  const int rank = rank_of(comm);
  std::vector<int64_t> bytes(files.size(), 0);
  std::string error;
  if (rank == 0) error = capture([&] {
      QUARTET_CHECK(is_directory(dir), "cannot commit checkpoint " + dir + ": no such directory (begin_checkpoint makes it)");
      for (size_t i = 0; i < paths.size(); ++i) {
        struct stat st {};
        QUARTET_CHECK(::stat(paths[i].c_str(), &st) == 0,
                      "cannot commit checkpoint: " + paths[i] + ": " + std::strerror(errno));
        QUARTET_CHECK(S_ISREG(st.st_mode), "cannot commit checkpoint: " + paths[i] + " is not a regular file");
        bytes[i] = static_cast<int64_t>(st.st_size);
      }
    });
  throw_if_any(error, comm);
  if (comm != MPI_COMM_NULL && !bytes.empty())
    watched::bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_INT64_T, 0, comm, "the checkpoint files' sizes");

  const ChunkSums sums = checksum_chunks(paths, bytes, chunk_bytes, comm);
  // The arrays are the same on every rank, so this fails everywhere alike.
  for (size_t f = 0; f < paths.size(); ++f)
    for (int64_t k = 0; k < chunks_of(bytes[f], chunk_bytes); ++k) {
      const int status = sums.status[static_cast<size_t>(sums.first[f] + k)];
      QUARTET_CHECK(status == 0, "cannot commit checkpoint: cannot read " + paths[f] + " bytes " +
                                     std::to_string(k * chunk_bytes) + ".." +
                                     std::to_string(std::min(bytes[f], (k + 1) * chunk_bytes)) + ": " +
                                     status_text(status));
    }

  if (rank == 0) error = capture([&] {
      Manifest m;
      m.iteration = iteration;
      m.created = utc_iso();
      m.chunk_bytes = chunk_bytes;
      m.info = info;
      for (size_t f = 0; f < files.size(); ++f) {
        ManifestFile mf{files[f], bytes[f], {}};
        for (int64_t k = 0; k < chunks_of(bytes[f], chunk_bytes); ++k)
          mf.chunks.push_back(sums.hash[static_cast<size_t>(sums.first[f] + k)]);
        m.files.push_back(std::move(mf));
      }
      // The files' data before the manifest that vouches for them, the manifest before `latest`.
      for (const std::string& p : paths) fsync_file(p);
      std::set<std::string> parents;  // names may lie in subdirectories of the step directory
      for (const std::string& p : paths) parents.insert(parent_directory(p));
      const std::string manifest = dir + "/" + kManifestName;
      write_text_atomically(manifest, manifest_json(m).dump(2) + "\n");
      try {
        for (const std::string& p : parents) fsync_directory(p);
        fsync_directory(dir);
        move_latest(out, iteration);  // also syncs checkpoints/, where step_<N> itself is listed
      } catch (...) {
        ::unlink(manifest.c_str());  // keep the promise: a failed commit leaves no manifest
        throw;
      }
      try {
        apply_retention(out, iteration, keep, keep_every);
      } catch (const std::exception& e) {
        throw Error("checkpoint " + dir + " is complete and latest names it, but removing old checkpoints failed: " +
                    e.what());
      }
    });
  throw_if_any(error, comm);
}

// ----- verification -----

struct Verified {
  std::vector<std::string> problems;
  std::optional<Manifest> manifest;
};

// Every regular file under `dir`, as a name relative to it ("actor.h5", "sub/x.h5").
void files_under(const std::string& dir, const std::string& prefix, std::vector<std::string>* out) {
  for (const std::string& name : list_directory(dir)) {
    const std::string path = dir + "/" + name, rel = prefix + name;
    if (is_directory(path)) files_under(path, rel + "/", out);
    else out->push_back(rel);
  }
}

// What is wrong with the size of a file the manifest lists, or "" when it is right (then its
// bytes are read back).
std::string size_problem(const std::string& dir, const std::string& label, const ManifestFile& f) {
  const std::string name = label + "/" + f.name, fpath = dir + "/" + f.name;
  struct stat st {};
  std::string problem;
  if (::stat(fpath.c_str(), &st) != 0)
    problem = errno == ENOENT ? name + ": missing (the manifest lists " + std::to_string(f.bytes) + " bytes)"
                              : name + ": cannot stat it: " + std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    problem = name + ": not a regular file";
  else if (static_cast<int64_t>(st.st_size) != f.bytes)
    problem = name + ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
              std::to_string(f.bytes) + (st.st_size < f.bytes ? " (truncated)" : " (grown)");
  return problem;
}

// The manifest fixes the set of files: the reader's files must be in it, and nothing in
// the directory may be outside it (a file it does not list is vouched for by nothing).
void file_set_problems(const std::string& dir, const std::string& label, const Manifest& m,
                       const CheckpointNeeds& needs, json& problems) {
  std::set<std::string> listed;
  for (const ManifestFile& f : m.files) listed.insert(f.name);
  const std::string reader = needs.reader.empty() ? "the reader" : needs.reader;
  for (const std::string& f : needs.files)
    if (!listed.count(f))
      problems.push_back(label + "/" + kManifestName + ": lists no " + f + ", which " + reader + " needs");
  std::vector<std::string> present;
  const std::string error = capture([&] { files_under(dir, "", &present); });
  if (!error.empty()) problems.push_back(label + ": cannot list it: " + error);
  for (const std::string& f : present)
    if (f != kManifestName && !listed.count(f))
      problems.push_back(label + "/" + f + ": in the directory, but not in the manifest");
}

// Rank 0's look at the directory, as JSON for the other ranks: "problems" found so far,
// "manifest" (its text, or null when it cannot be used) and, per listed file, "files": ""
// (the size is right: read it back) or what is wrong with it instead.
json survey(const std::string& dir, const std::string& label, const CheckpointNeeds& needs) {
  json plan = {{"problems", json::array()}, {"manifest", nullptr}, {"files", json::array()}};
  const std::string path = dir + "/" + kManifestName;
  if (!is_directory(dir)) {
    plan["problems"].push_back(label + ": no such directory");
    return plan;
  }
  if (!path_exists(path)) {
    plan["problems"].push_back(label + ": no manifest.json (the write did not finish)");
    return plan;
  }
  std::string text;
  std::optional<Manifest> m;
  const std::string error = capture([&] { text = read_file(path); });
  if (!error.empty()) {
    plan["problems"].push_back(label + "/" + kManifestName + ": cannot read it: " + error);
  } else {
    try {
      m = parse_manifest(text);
    } catch (const Malformed& e) {
      plan["problems"].push_back(label + "/" + kManifestName + ": malformed: " + e.what());
    }
  }
  if (!m) return plan;
  plan["manifest"] = text;
  const std::optional<int64_t> named = parse_step_name(label);
  if (named && *named != m->iteration)
    plan["problems"].push_back(label + "/" + kManifestName + ": says iteration " + std::to_string(m->iteration) +
                               ", but the directory is " + label);
  // A checkpoint of another kind is named as such, not by the files it lacks for this reader.
  const std::string foreign = needs.foreign ? needs.foreign(*m) : std::string();
  if (!foreign.empty()) plan["problems"].push_back(label + ": " + foreign);
  for (const ManifestFile& f : m->files) plan["files"].push_back(size_problem(dir, label, f));
  if (foreign.empty()) file_set_problems(dir, label, *m, needs, plan["problems"]);
  return plan;
}

// The chunks of each file whose size is right, against their checksums: a few ranges named per
// file, then how many more.
void chunk_problems(const std::string& dir, const std::string& label, const Manifest& m, const json& sizes,
                    MPI_Comm comm, std::vector<std::string>& problems) {
  std::vector<std::string> paths;
  std::vector<int64_t> bytes;
  for (size_t f = 0; f < m.files.size(); ++f) {
    paths.push_back(dir + "/" + m.files[f].name);
    bytes.push_back(sizes[f].get<std::string>().empty() ? m.files[f].bytes : -1);
  }
  const ChunkSums sums = checksum_chunks(paths, bytes, m.chunk_bytes, comm);
  for (size_t f = 0; f < m.files.size(); ++f) {
    const std::string name = label + "/" + m.files[f].name;
    const std::string size_problem = sizes[f].get<std::string>();
    if (!size_problem.empty()) {
      problems.push_back(size_problem);
      continue;
    }
    int listed = 0, more = 0;
    bool more_unreadable = false;
    for (int64_t k = 0; k < chunks_of(bytes[f], m.chunk_bytes); ++k) {
      const size_t g = static_cast<size_t>(sums.first[f] + k);
      const int status = sums.status[g];
      if (status == 0 && sums.hash[g] == m.files[f].chunks[static_cast<size_t>(k)]) continue;
      if (listed == kRangesPerFile) {
        ++more;
        more_unreadable = more_unreadable || status != 0;
        continue;
      }
      ++listed;
      const std::string range = "bytes " + std::to_string(k * m.chunk_bytes) + ".." +
                                std::to_string(std::min(bytes[f], (k + 1) * m.chunk_bytes));
      problems.push_back(status == 0 ? name + ": " + range + " do not match their checksum (corrupt)"
                                     : name + ": " + range + " cannot be read: " + status_text(status));
    }
    if (more > 0)
      problems.push_back(name + ": and " + std::to_string(more) +
                         (more_unreadable ? " more chunks do not match their checksum or cannot be read"
                                          : " more chunks do not match their checksum"));
  }
}

// What the files say of each other (needs.consistent, on rank 0), for every rank.
void consistency_problems(const std::string& dir, const std::string& label, const Manifest& m,
                          const CheckpointNeeds& needs, MPI_Comm comm, std::vector<std::string>& problems) {
  std::string found;
  if (rank_of(comm) == 0) {
    json list = json::array();
    const std::string error = capture([&] {
      for (const std::string& p : needs.consistent(dir, m)) list.push_back(label + "/" + p);
    });
    if (!error.empty()) list.push_back(label + ": " + error);
    found = list.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  bcast_string(&found, 0, comm);
  for (const json& p : json::parse(found)) problems.push_back(p.get<std::string>());
}

Verified verify(const std::string& step_directory, MPI_Comm comm, const CheckpointNeeds& needs) {
  const std::string dir = strip_trailing_slashes(step_directory);
  const std::string label = base_name(dir);
  // Rank 0 looks at the directory; every rank gets what it saw, so that all of them check the
  // same files against the same manifest and list the same problems in the same order.
  std::string plan_text;
  if (rank_of(comm) == 0)
    plan_text = survey(dir, label, needs).dump(-1, ' ', false, json::error_handler_t::replace);  // names need not be UTF-8
  bcast_string(&plan_text, 0, comm);
  const json plan = json::parse(plan_text);

  Verified v;
  for (const json& p : plan["problems"]) v.problems.push_back(p.get<std::string>());
  if (plan["manifest"].is_null()) return v;
  Manifest m = parse_manifest(plan["manifest"].get<std::string>());  // rank 0 parsed these bytes already
  chunk_problems(dir, label, m, plan["files"], comm, v.problems);
  // What the files say of each other, once their bytes are known to be the ones written.
  if (v.problems.empty() && needs.consistent) consistency_problems(dir, label, m, needs, comm, v.problems);
  v.manifest = std::move(m);
  return v;
}

std::string joined(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

}  // namespace

// step_<N> exactly as step_dir writes it (no sign, no leading zeros), so that one iteration has
// one directory name.
std::optional<int64_t> parse_step_name(const std::string& name) {
  const std::string prefix = "step_";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return static_cast<int64_t>(std::stoll(digits));
}

std::string checkpoints_dir(const std::string& out) { return strip_trailing_slashes(out) + "/checkpoints"; }

std::string step_dir(const std::string& out, int64_t iteration) {
  return checkpoints_dir(out) + "/step_" + std::to_string(iteration);
}

std::string begin_checkpoint(const std::string& out, int64_t iteration, MPI_Comm comm) {
  QUARTET_CHECK(iteration >= 0, "begin_checkpoint: iteration " + std::to_string(iteration) + " is negative");
  const std::string cdir = checkpoints_dir(out), dir = step_dir(out, iteration);
  std::string error;
  if (rank_of(comm) == 0) error = capture([&] {
      make_directories(cdir);
      // `latest` never names a directory that is being rewritten: a crash from here on leaves no
      // link rather than one to a half-written checkpoint.
      if (latest_target(out) == base_name(dir)) {
        const std::string link = cdir + "/latest";
        QUARTET_CHECK(::unlink(link.c_str()) == 0 || errno == ENOENT,
                      "cannot remove " + link + ": " + std::strerror(errno));
        fsync_directory(cdir);
      }
      remove_checkpoint(dir);
      QUARTET_CHECK(::mkdir(dir.c_str(), 0755) == 0, "cannot create directory " + dir + ": " + std::strerror(errno));
      fsync_directory(cdir);
    });
  // Doubles as the barrier: no rank returns before rank 0 has made the directory (or failed).
  throw_if_any(error, comm);
  return dir;
}

void commit_checkpoint(const std::string& out, int64_t iteration, const std::vector<std::string>& files,
                       const nlohmann::json& info, MPI_Comm comm, int keep, int keep_every) {
  commit(out, iteration, files, info, comm, keep, keep_every, kChecksumChunkBytes);
}

void detail::commit_checkpoint(const std::string& out, int64_t iteration, const std::vector<std::string>& files,
                               const nlohmann::json& info, MPI_Comm comm, int keep, int keep_every,
                               int64_t chunk_bytes) {
  commit(out, iteration, files, info, comm, keep, keep_every, chunk_bytes);
}

Manifest read_manifest(const std::string& step_directory) {
  const std::string path = strip_trailing_slashes(step_directory) + "/" + kManifestName;
  QUARTET_CHECK(path_exists(path), path + ": no such file (the checkpoint is incomplete: its write did not finish)");
  const std::string text = read_file(path);
  try {
    return parse_manifest(text);
  } catch (const Malformed& e) {
    fail(__FILE__, __LINE__, path + ": malformed: " + e.what());
  }
}

std::vector<std::string> verify_checkpoint(const std::string& step_directory, MPI_Comm comm,
                                           const CheckpointNeeds& needs) {
  return verify(step_directory, comm, needs).problems;
}

std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& out, MPI_Comm comm,
                                                      std::vector<std::string>* warnings,
                                                      const CheckpointNeeds& needs) {
  // Rank 0 lists the directory for everyone, so all ranks try the same steps in the same order.
  std::string listing;
  if (rank_of(comm) == 0) {
    json l = {{"steps", json::array()}, {"latest", ""}, {"error", ""}};
    l["error"] = capture([&] {
      l["steps"] = list_checkpoint_steps(out);
      l["latest"] = latest_target(out);
    });
    listing = l.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  bcast_string(&listing, 0, comm);
  const json l = json::parse(listing);
  throw_if_any(l["error"].get<std::string>(), MPI_COMM_NULL);  // every rank has the same message
  const std::vector<int64_t> steps = l["steps"].get<std::vector<int64_t>>();
  const std::string latest = l["latest"].get<std::string>();

  std::vector<std::string> notes;
  std::set<std::string> skipped;
  std::optional<FoundCheckpoint> found;
  for (auto it = steps.rbegin(); it != steps.rend() && !found; ++it) {
    const std::string dir = step_dir(out, *it);
    Verified v = verify(dir, comm, needs);
    if (v.problems.empty()) {
      found = FoundCheckpoint{dir, std::move(*v.manifest)};
    } else {
      notes.push_back("checkpoint " + base_name(dir) + " skipped: " + joined(v.problems, "; "));
      skipped.insert(base_name(dir));
    }
  }
  // `latest` lags the newest good checkpoint after a crash between manifest and link, which is
  // harmless; it naming a bad or absent one is worth a word.
  if (!latest.empty() && (!found || base_name(found->dir) != latest)) {
    const std::optional<int64_t> n = parse_step_name(latest);
    const std::string then = found ? "; using " + base_name(found->dir) : "; there is no good checkpoint";
    if (skipped.count(latest))
      notes.push_back("checkpoints/latest names " + latest + ", which was skipped (see above)" + then);
    else if (!n || std::find(steps.begin(), steps.end(), *n) == steps.end())
      notes.push_back("checkpoints/latest names " + latest + ", which is not a checkpoint directory" + then);
  }
  if (warnings) warnings->insert(warnings->end(), notes.begin(), notes.end());
  return found;
}

std::vector<int64_t> list_checkpoint_steps(const std::string& out) {
  const std::string cdir = checkpoints_dir(out);
  if (!is_directory(cdir)) return {};
  std::vector<int64_t> steps;
  for (const std::string& name : list_directory(cdir)) {
    const std::optional<int64_t> n = parse_step_name(name);
    if (n && is_directory(cdir + "/" + name)) steps.push_back(*n);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<int64_t> unfinished_checkpoint_steps(const std::string& out) {
  std::vector<int64_t> unfinished;
  for (int64_t s : list_checkpoint_steps(out))
    if (!path_exists(step_dir(out, s) + "/" + kManifestName)) unfinished.push_back(s);
  return unfinished;
}

void remove_unfinished_checkpoints(const std::string& out, const std::vector<int64_t>& steps) {
  for (int64_t s : steps) remove_checkpoint(step_dir(out, s));
  if (!steps.empty()) fsync_directory(checkpoints_dir(out));
}

}  // namespace quartet
