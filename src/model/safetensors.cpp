#include "quartet/model/safetensors.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"

// The format is little-endian and we copy bytes straight into tensors.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors needs a little-endian host");

namespace quartet {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeader = 100ull << 20;  // HF's own limit: a bigger one is an attack

const std::vector<std::pair<std::string, c10::ScalarType>>& dtype_names() {
  // clang-format off
  static const std::vector<std::pair<std::string, c10::ScalarType>> names = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16}, {"I64", torch::kInt64}, {"I32", torch::kInt32},
      {"I16", torch::kInt16}, {"I8", torch::kInt8}, {"U8", torch::kUInt8}, {"BOOL", torch::kBool},
      {"F8_E4M3", torch::kFloat8_e4m3fn}, {"F8_E5M2", torch::kFloat8_e5m2}};
  // clang-format on
  return names;
}

const std::string* name_of(c10::ScalarType t) {
  for (const auto& [n, s] : dtype_names())
    if (s == t) return &n;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <class T>
std::string range_str(T a, T b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + ")";
}

// A JSON integer as a non-negative count; false for floats, negatives and anything else.
bool as_count(const json& j, std::uint64_t& out) {
  if (j.is_number_unsigned()) return out = j.get<std::uint64_t>(), true;
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return out = j.get<std::uint64_t>(), true;
  return false;
}

// The number of elements, or nullopt-like `false` when the product overflows 64 bits (a hostile
// header could otherwise wrap around to match its byte range).
bool checked_numel(const std::vector<int64_t>& shape, std::uint64_t& n) {
  n = 1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return n = 0, true;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return false;
  return true;
}

std::string errno_text() { return std::strerror(errno); }


std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QUARTET_CHECK(in, "cannot open " + path + ": " + errno_text());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QUARTET_CHECK(fd_ >= 0, "cannot open " + path + ": " + errno_text());
  try {
    struct stat st {};
    QUARTET_CHECK(::fstat(fd_, &st) == 0, "cannot stat " + path + ": " + errno_text());
    size_ = static_cast<std::size_t>(st.st_size);
    QUARTET_CHECK(size_ >= 8, path + ": the file is " + std::to_string(size_) +
                                  " bytes, too short for the 8-byte header length");
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    QUARTET_CHECK(m != MAP_FAILED, "cannot mmap " + path + ": " + errno_text());
    map_ = static_cast<const std::uint8_t*>(m);

    std::uint64_t n = 0;
    std::memcpy(&n, map_, 8);
    QUARTET_CHECK(n <= kMaxHeader,
                  path + ": header length " + std::to_string(n) + " is over the 100 MiB limit");
    QUARTET_CHECK(n <= size_ - 8, path + ": header length " + std::to_string(n) +
                                      " goes beyond the file (" + std::to_string(size_) +
                                      " bytes)");
    data_start_ = 8 + n;
    const std::uint64_t data_size = size_ - data_start_;
    const char* h = reinterpret_cast<const char*>(map_ + 8);
    json header;
    try {
      header = json::parse(h, h + n);
    } catch (const json::parse_error& e) {
      fail(__FILE__, __LINE__, path + ": corrupt JSON header: " + e.what());
    }
    QUARTET_CHECK(header.is_object(), path + ": the JSON header is not an object");

    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        QUARTET_CHECK(v.is_object(), path + ": __metadata__ is not a string-to-string map");
        for (const auto& [k, s] : v.items()) {
          QUARTET_CHECK(s.is_string(),
                        path + ": __metadata__ value of '" + k + "' is not a string");
          metadata_[k] = s.get<std::string>();
        }
        continue;
      }
      const std::string at = path + ": tensor '" + name + "'";
      QUARTET_CHECK(
          v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
          at + " lacks dtype, shape or data_offsets");
      SafetensorsEntry e;
      e.name = name;
      const json& dt = v["dtype"];
      QUARTET_CHECK(dt.is_string(), at + ": dtype is not a string");
      auto it = std::find_if(dtype_names().begin(), dtype_names().end(),
                             [&](const auto& p) { return p.first == dt.get<std::string>(); });
      QUARTET_CHECK(it != dtype_names().end(),
                    at + " has unsupported dtype '" + dt.get<std::string>() + "'");
      e.dtype = it->second;
      const json& sh = v["shape"];
      QUARTET_CHECK(sh.is_array(), at + ": shape is not a list");
      for (const json& d : sh) {
        std::uint64_t x = 0;
        QUARTET_CHECK(as_count(d, x) && x <= std::uint64_t(std::numeric_limits<int64_t>::max()),
                      at + ": shape " + sh.dump() + " is not a list of non-negative integers");
        e.shape.push_back(static_cast<int64_t>(x));
      }
      const json& off = v["data_offsets"];
      QUARTET_CHECK(off.is_array() && off.size() == 2 && as_count(off[0], e.begin) &&
                        as_count(off[1], e.end) && e.begin <= e.end,
                    at + ": data_offsets " + off.dump() + " is not [begin, end] with begin <= end");
      QUARTET_CHECK(e.end <= data_size, at + " needs bytes " + range_str(e.begin, e.end) +
                                            " of the data section but the file holds only " +
                                            std::to_string(data_size));
      std::uint64_t numel = 0, bytes = 0;
      bool fits = checked_numel(e.shape, numel) &&
                  !__builtin_mul_overflow(numel, c10::elementSize(e.dtype), &bytes);
      QUARTET_CHECK(fits && bytes == e.end - e.begin,
                    at + ": shape mismatch: " + shape_str(e.shape) + " of " +
                        dt.get<std::string>() + " needs " +
                        (fits ? std::to_string(bytes) : "over 2^64") + " bytes but data_offsets " +
                        range_str(e.begin, e.end) + " hold " + std::to_string(e.end - e.begin));
      entries_.push_back(std::move(e));
    }

    // In data order; empty tensors occupy no bytes and so cannot overlap anything.
    std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    // The tensors tile the data section exactly, as the safetensors library requires: no
    // overlap, no hole, nothing after the last tensor (bytes appended to a file, or a file
    // spliced from two, are refused rather than ignored).
    const SafetensorsEntry* reach = nullptr;  // the non-empty tensor reaching furthest so far
    for (const auto& e : entries_) {
      if (e.begin == e.end) continue;
      const std::uint64_t covered = reach ? reach->end : 0;
      QUARTET_CHECK(e.begin >= covered, path + ": tensors '" + reach->name + "' " + range_str(reach->begin, reach->end) +
                                            " and '" + e.name + "' " + range_str(e.begin, e.end) + " overlap");
      QUARTET_CHECK(e.begin == covered, path + ": bytes " + range_str(covered, e.begin) +
                                            " of the data section belong to no tensor (before '" + e.name + "')");
      reach = &e;
    }
    const std::uint64_t covered = reach ? reach->end : 0;
    QUARTET_CHECK(covered == data_size, path + ": bytes " + range_str(covered, data_size) +
                                            " of the data section follow the last tensor and belong to none "
                                            "(bytes appended to the file?)");
    for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  } catch (...) {
    if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

bool SafetensorsFile::has(const std::string& name) const { return index_.count(name) > 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  QUARTET_CHECK(it != index_.end(), "no tensor '" + name + "' in " + path_);
  return entries_[it->second];
}

torch::Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin) std::memcpy(t.data_ptr(), map_ + data_start_ + e.begin, e.end - e.begin);
  return t;
}

torch::Tensor SafetensorsFile::slice(const std::string& name, int64_t dim, int64_t start,
                                     int64_t length) const {
  const SafetensorsEntry& e = entry(name);
  const int64_t rank = static_cast<int64_t>(e.shape.size());
  const std::string at = path_ + ": tensor '" + name + "' " + shape_str(e.shape);
  QUARTET_CHECK(dim >= 0 && dim < rank,
                at + " has no dimension " + std::to_string(dim) + " to slice along");
  const int64_t size = e.shape[dim];
  QUARTET_CHECK(start >= 0 && length >= 0 && start <= size && length <= size - start,
                at + ": slice " + range_str(start, start + length) + " of dimension " +
                    std::to_string(dim) + " is outside [0, " + std::to_string(size) + ")");
  std::vector<int64_t> shape = e.shape;
  shape[dim] = length;
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(e.dtype));
  // outer blocks of `size` rows of `row` bytes each; copy `length` rows from each block, which
  // for dim 0 is one contiguous range, so only its pages of the mapping are ever touched.
  int64_t outer = 1, row = static_cast<int64_t>(c10::elementSize(e.dtype));
  for (int64_t d = 0; d < dim; ++d) outer *= e.shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) row *= e.shape[d];
  const std::uint8_t* src = map_ + data_start_ + e.begin;
  auto* dst = static_cast<std::uint8_t*>(t.data_ptr());
  const std::size_t piece = static_cast<std::size_t>(length * row);
  if (piece == 0) return t;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * piece, src + (o * size + start) * row, piece);
  return t;
}

// ---------------------------------------------------------------------------------------------
// A model directory
// ---------------------------------------------------------------------------------------------

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir) : dir_(dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string ipath = dir + "/model.safetensors.index.json";
  if (path_exists(single)) {
    // The one file must be opened to learn its names anyway.
    auto f = std::make_unique<SafetensorsFile>(single);
    for (const auto& e : f->entries()) file_of_name_[e.name] = "model.safetensors";
    open_["model.safetensors"] = std::move(f);
    return;
  }
  QUARTET_CHECK(path_exists(ipath), "no model.safetensors or model.safetensors.index.json in " + dir);
  // nlohmann keeps the last of duplicate keys silently, so a tensor listed twice in weight_map
  // (two shards claiming it) is caught while parsing: keys at depth 2 under "weight_map".
  std::string top_key, twice;
  std::set<std::string> seen;
  json::parser_callback_t watch = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) top_key = parsed.get<std::string>();
    if (ev == json::parse_event_t::key && depth == 2 && top_key == "weight_map" &&
        !seen.insert(parsed.get<std::string>()).second && twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(read_text(ipath), watch);
  } catch (const json::parse_error& e) {
    fail(__FILE__, __LINE__, ipath + ": corrupt JSON: " + e.what());
  }
  QUARTET_CHECK(twice.empty(), ipath + ": tensor '" + twice + "' is listed in two shards");
  QUARTET_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                ipath + ": no weight_map object");
  for (const auto& [name, file] : j["weight_map"].items()) {
    QUARTET_CHECK(file.is_string(), ipath + ": tensor '" + name + "' maps to a non-string");
    const std::string f = file.get<std::string>();
    QUARTET_CHECK(path_exists(dir + "/" + f), ipath + " puts tensor '" + name + "' in " + f +
                                             ", which does not exist in " + dir);
    file_of_name_[name] = f;
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : file_of_name_) out.push_back(kv.first);
  return out;
}

bool SafetensorsCheckpoint::has(const std::string& name) const {
  return file_of_name_.count(name) > 0;
}

// Not thread-safe: shards are opened on first use and cached.
const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = file_of_name_.find(name);
  QUARTET_CHECK(it != file_of_name_.end(), "no tensor '" + name + "' in " + dir_);
  auto& f = open_[it->second];
  if (!f) {
    auto opened = std::make_unique<SafetensorsFile>(dir_ + "/" + it->second);
    // A shard holding a tensor that the index puts in another shard: which copy is meant?
    for (const auto& e : opened->entries()) {
      auto claimed = file_of_name_.find(e.name);
      QUARTET_CHECK(claimed == file_of_name_.end() || claimed->second == it->second,
                    "tensor '" + e.name + "' is in both " + opened->path() + " and " +
                        claimed->second + " (where the index puts it) in " + dir_);
    }
    f = std::move(opened);
  }
  return *f;
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  return file_of(name).entry(name);
}

torch::Tensor SafetensorsCheckpoint::get(const std::string& name) const {
  return file_of(name).get(name);
}

void check_finite_weights(const SafetensorsCheckpoint& checkpoint, const std::string& name, const torch::Tensor& values) {
  if (values.numel() == 0 || !values.is_floating_point() || torch::isfinite(values).all().item<bool>()) return;
  const torch::Tensor flat = values.reshape({-1});
  const int64_t first = (~torch::isfinite(flat)).nonzero()[0][0].item<int64_t>();
  fail(__FILE__, __LINE__,
       checkpoint.dir() + ": tensor '" + name + "' holds " + std::to_string((~torch::isfinite(flat)).sum().item<int64_t>()) +
           " NaN or infinite values (the first at flat element " + std::to_string(first) + ": " +
           std::to_string(flat[first].item<double>()) + "): the weights are damaged");
}

torch::Tensor SafetensorsCheckpoint::slice(const std::string& name, int64_t dim, int64_t start,
                                           int64_t length) const {
  return file_of(name).slice(name, dim, start, length);
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Everything that can be refused is refused before the temporary file exists.
  std::set<std::string> names;
  std::vector<torch::Tensor> cpu;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    QUARTET_CHECK(names.insert(name).second, path + ": tensor '" + name + "' is given twice");
    QUARTET_CHECK(name != "__metadata__", path + ": a tensor cannot be named __metadata__");
    QUARTET_CHECK(t.defined(), path + ": tensor '" + name + "' is undefined");
    const std::string* dt = name_of(t.scalar_type());
    QUARTET_CHECK(dt, path + ": tensor '" + name + "' has dtype " +
                          std::string(c10::toString(t.scalar_type())) +
                          ", which safetensors cannot hold here");
    cpu.push_back(t.detach().to(torch::kCPU).contiguous());
    const std::uint64_t bytes = cpu.back().nbytes();
    header[name] = {
        {"dtype", *dt}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // as HF pads, so that the data section is 8-aligned
  const std::uint64_t n = h.size();
  write_file_atomically(path, [&](int fd) {
    write_all(fd, &n, 8, path);
    write_all(fd, h.data(), h.size(), path);
    for (const auto& t : cpu)
      if (t.nbytes() > 0) write_all(fd, t.data_ptr(), t.nbytes(), path);
  });
}

void save_safetensors_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                 std::uint64_t max_shard_bytes) {
  // transformers refuses safetensors files whose metadata lacks format=pt.
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  const std::string index = dir + "/model.safetensors.index.json";

  // HF's greedy split: a shard is closed when the next tensor would overflow it; a tensor
  // bigger than the limit gets a shard of its own.
  std::vector<NamedTensors> shards(1);
  std::uint64_t total = 0, in_shard = 0;
  std::set<std::string> names;
  for (const auto& nt : tensors) {
    QUARTET_CHECK(names.insert(nt.first).second,
                  dir + ": tensor '" + nt.first + "' is given twice");
    const std::uint64_t b = nt.second.defined() ? nt.second.nbytes() : 0;
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += b;
    total += b;
  }
  make_directories(dir);
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors(dir + "/model.safetensors", tensors, meta);
    written.insert("model.safetensors");
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    const std::size_t k = shards.size();
    for (std::size_t i = 0; i < k; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, k);
      save_safetensors(dir + "/" + name, shards[i], meta);
      for (const auto& nt : shards[i]) weight_map[nt.first] = name;
      written.insert(name);
    }
    // Written last: until it exists the directory does not claim to be a sharded checkpoint.
    const std::string text =
        nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) +
        "\n";
    write_text_atomically(index, text);
    written.insert("model.safetensors.index.json");
  }
  // Weights of an earlier save would shadow (model.safetensors) or confuse (an index, old
  // shards) readers of this one; remove them only now that the new set is complete.
  DIR* d = ::opendir(dir.c_str());
  QUARTET_CHECK(d, "cannot list " + dir + ": " + errno_text());
  std::vector<std::string> stale;
  while (const dirent* f = ::readdir(d)) {
    const std::string n = f->d_name;
    const bool ours = n == "model.safetensors" || n == "model.safetensors.index.json" ||
                      (n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                       n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0);
    if (ours && !written.count(n)) stale.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& p : stale) ::unlink(p.c_str());
}

}  // namespace quartet
