#pragma once
// Sharded tensors in one HDF5 file, the checkpoint's model format (PyTorch DCP's idea, in HDF5):
// every tensor is one dataset with its global shape, and each rank of the model group writes the
// elements it owns at their global offsets, collectively with parallel HDF5. Any number of ranks
// reads any flat range back, so a model saved by 4 ranks loads on 2 (resharding on load).
//
// A group holds one family of tensors under the parameters' Hugging Face names, e.g.
//   /model/<name>                  the weights in the compute dtype
//   /optimizer/master/<name>       float32 master weights      (trained models)
//   /optimizer/exp_avg/<name>      AdamW first moment          (trained models)
//   /optimizer/exp_avg_sq/<name>   AdamW second moment         (trained models)
// float32 is stored as IEEE float32; bfloat16 as a 16-bit HDF5 float type with bfloat16's bit
// fields (h5py reads it with .astype('f4'), exactly); float16 as IEEE float16.
// A rank's shard of a unit is a flat range of the unit's buffer (flat_layout.hpp), so its part of
// one parameter is a flat range of that parameter: written as the union of the row-major blocks
// that cover the range.
#include <hdf5.h>
#include <mpi.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "quartet/shard/flat_layout.hpp"
#include "quartet/shard/sharded_model.hpp"

namespace quartet {

// Which part of a flat range [begin, begin + count) of a tensor with `shape` (row-major) falls
// in which N-D block: blocks of (start, extent) per dimension whose union, in row-major order,
// is exactly the range. At most 2 * rank - 1 blocks.
struct Block {
  std::vector<int64_t> start, extent;
};
std::vector<Block> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin, int64_t count);

class ShardedH5Writer {
 public:
  // Collective over `comm` (the model group): creates `path`, replacing any file there.
  ShardedH5Writer(const std::string& path, MPI_Comm comm);
  ~ShardedH5Writer();  // closes (collectively) if close() was not called; errors are swallowed there
  ShardedH5Writer(const ShardedH5Writer&) = delete;
  ShardedH5Writer& operator=(const ShardedH5Writer&) = delete;

  // Collective: one dataset per parameter of `layout`, "<group>/<hf name>", global shape,
  // stored as `disk_dtype`; this rank (`rank` of the group whose size the layout was made for)
  // writes its elements from `shards` (per unit, this rank's 1-D shard of layout[u].shard
  // elements, any dtype and device; padding is not written).
  void write_family(const std::string& group, const std::vector<UnitLayout>& layout, int rank,
                    const std::vector<torch::Tensor>& shards, torch::ScalarType disk_dtype);
  // Root attributes (collective: every rank passes the same value).
  void attribute(const std::string& name, const std::string& value);
  void attribute(const std::string& name, int64_t value);
  // Collective: flushes and closes. The file is complete on disk when this returns.
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MPI_Comm comm_;
  hid_t file_ = -1;
};

class ShardedH5Reader {
 public:
  // Opens read-only for independent reads; `comm` = the ranks that will read (collective over
  // it), or MPI_COMM_NULL for the default POSIX driver without MPI (the tools: export,
  // inspect). A missing or damaged file is a quartet::Error naming it.
  ShardedH5Reader(const std::string& path, MPI_Comm comm);
  ~ShardedH5Reader();
  ShardedH5Reader(const ShardedH5Reader&) = delete;
  ShardedH5Reader& operator=(const ShardedH5Reader&) = delete;

  bool has(const std::string& dataset) const;                 // e.g. "model/lm_head.weight"
  std::vector<int64_t> shape(const std::string& dataset) const;  // throws naming file and dataset
  torch::ScalarType dtype(const std::string& dataset) const;     // as stored (float32 | bfloat16 | float16)
  // The datasets directly in `group`, sorted.
  std::vector<std::string> names(const std::string& group) const;
  // Elements [begin, begin + count) of the flattened dataset, 1-D, CPU, in the stored dtype.
  torch::Tensor read_flat(const std::string& dataset, int64_t begin, int64_t count) const;
  // The whole dataset with its shape (CPU, stored dtype).
  torch::Tensor read(const std::string& dataset) const;
  bool has_attribute(const std::string& name) const;            // root
  std::string string_attribute(const std::string& name) const;  // root; throws if missing
  int64_t int_attribute(const std::string& name) const;         // root; throws if missing

  // A ShardedModel ParamSource over "<group>/<name>": checks every name and shape (a missing
  // tensor or a shape mismatch names the file, the dataset and both shapes); values come in
  // the stored dtype. It refers to this reader, which must outlive its use.
  ParamSource source(const std::string& group) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  hid_t file_ = -1;
};

}  // namespace quartet
