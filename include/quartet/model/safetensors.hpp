#pragma once
// safetensors, the Hugging Face weight format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// raw little-endian data. Files are memory-mapped and validated when opened; a tensor (or a
// slice of one, for a rank that holds only its shard) is copied out on request.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace quartet {

struct SafetensorsEntry {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

// One .safetensors file, memory-mapped read-only. Opening validates everything the header claims
// (JSON, dtypes, shapes against byte sizes, offsets inside the file, no overlaps) and throws
// quartet::Error naming the file and the tensor at fault, so a truncated or hostile file is
// refused before any tensor is read. Dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3
// F8_E5M2. Reading never changes the object, so const calls may run on several threads.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data order
  bool has(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // throws if missing
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor holding a copy of the named tensor.
  torch::Tensor get(const std::string& name) const;
  // Rows [start, start + length) along dimension `dim` (0 <= dim < rank), reading only those
  // bytes' pages: along dim 0 that is one contiguous range, which is how a rank loads its shard.
  torch::Tensor slice(const std::string& name, int64_t dim, int64_t start, int64_t length) const;

 private:
  std::string path_;
  int fd_ = -1;
  const std::uint8_t* map_ = nullptr;
  std::size_t size_ = 0;
  std::size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory's weights: model.safetensors, or the shards listed in
// model.safetensors.index.json ({"weight_map": {tensor: file}}; every file must exist, and no
// tensor may be claimed by two shards). Shards open lazily and stay open; that cache makes the
// const calls unsafe to share between threads.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& dir);
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  torch::Tensor get(const std::string& name) const;
  torch::Tensor slice(const std::string& name, int64_t dim, int64_t start, int64_t length) const;
  const std::string& dir() const { return dir_; }

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string dir_;
  std::map<std::string, std::string> file_of_name_;  // tensor -> file name in dir_
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// Throws, naming the checkpoint's directory, the tensor and its first bad element, when `values`
// (tensor `name` of `checkpoint` as loaded, or a rank's part of it) hold a NaN or an infinity:
// weights that can only make every output NaN (an all-NaN file generated empty completions).
void check_finite_weights(const SafetensorsCheckpoint& checkpoint, const std::string& name, const torch::Tensor& values);

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes one file atomically (path + ".tmp", fsynced, renamed into place), tensors made contiguous
// on the CPU and laid out in the given order, the header exactly as HF writes it (compact JSON,
// "__metadata__" first and only when non-empty, space-padded to a multiple of 8). Duplicate names
// and dtypes the format lacks are refused before anything is written.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Writes model.safetensors when everything fits in max_shard_bytes, else
// model-0000K-of-0000N.safetensors shards (HF's greedy split: a tensor over the limit gets a shard
// of its own) plus model.safetensors.index.json, written last. Files carry {"format": "pt"},
// which transformers requires. Creates dir; weights files of an earlier save that the new set
// does not overwrite (a model.safetensors that would shadow the index, stale shards) are removed
// once the new set is complete. Each file is atomic; the set as a whole is not.
void save_safetensors_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                 std::uint64_t max_shard_bytes = 5ull << 30);

}  // namespace quartet
