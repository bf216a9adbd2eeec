#include "quartet/io/sharded_h5.hpp"

#include <torch/types.h>

#include <algorithm>
#include <numeric>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/io/h5.hpp"

namespace quartet {

using h5::H5;

// ---- flat ranges as N-D blocks ----------------------------------------------------------------

namespace {

// Blocks of the range [b, e) of the sub-tensor shape[d..] (row-major, `inner[d]` elements per
// index of dimension d), behind the fixed one-element prefix in `at`. Row-major order out.
void range_blocks(const std::vector<int64_t>& shape, const std::vector<int64_t>& inner, size_t d, int64_t b,
                  int64_t e, std::vector<int64_t>& at, std::vector<Block>& out) {
  const size_t n = shape.size();
  auto emit = [&](int64_t start, int64_t extent) {
    Block blk;
    blk.start = at;
    blk.extent.assign(at.size(), 1);
    if (d < n) {
      blk.start.push_back(start);
      blk.extent.push_back(extent);
      for (size_t k = d + 1; k < n; ++k) {  // whole trailing dimensions
        blk.start.push_back(0);
        blk.extent.push_back(shape[k]);
      }
    }
    out.push_back(std::move(blk));
  };
  if (d == n) {  // a single element (a 0-D tensor, or a position fixed in every dimension)
    emit(0, 0);
    return;
  }
  const int64_t S = inner[d];
  if (b % S == 0 && e % S == 0) {  // whole slices along d: one block
    emit(b / S, (e - b) / S);
    return;
  }
  int64_t b0 = b / S;
  const int64_t e0 = e / S;
  if (b0 == (e - 1) / S) {  // inside one slice: fix this index, recurse
    at.push_back(b0);
    range_blocks(shape, inner, d + 1, b - b0 * S, e - b0 * S, at, out);
    at.pop_back();
    return;
  }
  if (b % S != 0) {  // head: the end of a partial slice
    at.push_back(b0);
    range_blocks(shape, inner, d + 1, b % S, S, at, out);
    at.pop_back();
    ++b0;
  }
  if (e0 > b0) emit(b0, e0 - b0);  // body: whole slices
  if (e % S != 0) {                // tail: the start of a partial slice
    at.push_back(e0);
    range_blocks(shape, inner, d + 1, 0, e % S, at, out);
    at.pop_back();
  }
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

std::string shape_str(const std::vector<int64_t>& shape) { return c10::str(c10::IntArrayRef(shape)); }

}  // namespace

std::vector<Block> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin, int64_t count) {
  for (int64_t s : shape) QUARTET_CHECK(s >= 0, "flat_range_blocks: negative extent in shape " + shape_str(shape));
  const int64_t numel = numel_of(shape);
  QUARTET_CHECK(begin >= 0 && count >= 0 && begin + count <= numel,
                "flat_range_blocks: range [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                    ") is outside a tensor of shape " + shape_str(shape) + " (" + std::to_string(numel) +
                    " elements)");
  std::vector<Block> out;
  if (count == 0) return out;
  std::vector<int64_t> inner(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) inner[k - 1] = inner[k] * shape[k];
  std::vector<int64_t> at;
  range_blocks(shape, inner, 0, begin, begin + count, at, out);
  return out;
}

// ---- types and selections ---------------------------------------------------------------------

namespace {

// A 16-bit float with the given bit fields, derived from IEEE float32 (the recipe HDF5's own
// documentation gives for user-defined floats). Used as file type and memory type alike, so
// HDF5 moves the raw bits without converting.
H5 float16_type(size_t epos, size_t esize, size_t msize, size_t ebias) {
  H5 t{H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)), H5Tclose};
  H5_CHECK(H5Tset_fields(t.id, 15, epos, esize, 0, msize));
  H5_CHECK(H5Tset_offset(t.id, 0));
  H5_CHECK(H5Tset_precision(t.id, 16));
  H5_CHECK(H5Tset_size(t.id, 2));
  H5_CHECK(H5Tset_ebias(t.id, ebias));
  return t;
}

// The HDF5 type a tensor of `dtype` is stored as (little-endian, as torch's CPU memory is on
// every platform quartet runs on).
H5 h5_type_of(torch::ScalarType dtype, const std::string& context) {
  switch (dtype) {
    case torch::kFloat32: return {H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)), H5Tclose};
    case torch::kBFloat16: return float16_type(7, 8, 7, 127);
    case torch::kFloat16: return float16_type(10, 5, 10, 15);
    default:
      QUARTET_CHECK(false, context + ": cannot store " + std::string(c10::toString(dtype)) +
                               " (float32, bfloat16 and float16 only)");
      return {};
  }
}

// The torch dtype of a stored type, by its bit layout; -1 (Undefined) when it is none of ours.
torch::ScalarType dtype_of(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_order(type) != H5T_ORDER_LE || H5Tget_offset(type) != 0)
    return torch::ScalarType::Undefined;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return torch::ScalarType::Undefined;
  const size_t size = H5Tget_size(type), ebias = H5Tget_ebias(type);
  if (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 && ebias == 127)
    return torch::kFloat32;
  if (size == 2 && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && ebias == 127)
    return torch::kBFloat16;
  if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && ebias == 15)
    return torch::kFloat16;
  return torch::ScalarType::Undefined;
}

// Selects on `space` (a dataspace of `shape`) the elements [begin, begin + count) of the
// flattened tensor: the union of flat_range_blocks' blocks, or nothing.
void select_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t count,
                  const std::string& context) {
  if (count == 0) {
    H5_CHECK_AT(context, H5Sselect_none(space));
    return;
  }
  if (shape.empty()) {  // a scalar dataspace takes no hyperslab
    H5_CHECK_AT(context, H5Sselect_all(space));
    return;
  }
  const auto blocks = flat_range_blocks(shape, begin, count);
  std::vector<hsize_t> start(shape.size()), extent(shape.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::copy(blocks[i].start.begin(), blocks[i].start.end(), start.begin());
    std::copy(blocks[i].extent.begin(), blocks[i].extent.end(), extent.begin());
    H5_CHECK_AT(context, H5Sselect_hyperslab(space, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(),
                                             nullptr, extent.data(), nullptr));
  }
}

H5 space_of(const std::vector<int64_t>& shape, const std::string& context) {
  if (shape.empty()) return {H5_CHECK_AT(context, H5Screate(H5S_SCALAR)), H5Sclose};
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return {H5_CHECK_AT(context, H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose};
}

}  // namespace

// ---- the writer -------------------------------------------------------------------------------

ShardedH5Writer::ShardedH5Writer(const std::string& path, MPI_Comm comm) : path_(path), comm_(comm) {
  QUARTET_CHECK(comm != MPI_COMM_NULL, path + ": a sharded HDF5 file is written by a group (MPI_COMM_NULL given)");
  H5 fapl{H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose};
  H5_CHECK(H5Pset_fapl_mpio(fapl.id, comm, MPI_INFO_NULL));
  // Large datasets start on 1 MiB boundaries: parallel file systems stripe at that size or a
  // multiple, so no rank's write straddles a stripe it shares with a neighbour's dataset.
  H5_CHECK(H5Pset_alignment(fapl.id, 1 << 20, 1 << 20));
  // Every rank creates the same objects in the same order: metadata can be read and written
  // collectively (one rank reads, the file system is not hit by every rank).
  H5_CHECK(H5Pset_all_coll_metadata_ops(fapl.id, 1));
  H5_CHECK(H5Pset_coll_metadata_write(fapl.id, 1));
  h5::Quiet quiet;
  auto watch = watched::scope(comm, "creating " + path);
  file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id);
  QUARTET_CHECK(file_ >= 0, path + ": cannot create the file: " + h5::error_stack());
}

ShardedH5Writer::~ShardedH5Writer() {
  if (file_ < 0) return;
  h5::Quiet quiet;
  auto watch = watched::scope(comm_, "closing " + path_ + " after an error");
  H5Fclose(file_);
  file_ = -1;
}

void ShardedH5Writer::write_family(const std::string& group, const std::vector<UnitLayout>& layout, int rank,
                                   const std::vector<torch::Tensor>& shards, torch::ScalarType disk_dtype) {
  QUARTET_CHECK(file_ >= 0, path_ + ": write_family('" + group + "') after close()");
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm_, &size));
  QUARTET_CHECK(rank >= 0 && rank < size,
                path_ + ": rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
  QUARTET_CHECK(shards.size() == layout.size(), path_ + ", group '" + group + "': " + std::to_string(shards.size()) +
                                                    " shards for " + std::to_string(layout.size()) + " units");
  for (size_t u = 0; u < layout.size(); ++u) {
    QUARTET_CHECK(layout[u].shard * size == layout[u].padded,
                  path_ + ", group '" + group + "': the layout of unit '" + layout[u].name +
                      "' was made for a group of " + std::to_string(layout[u].padded / std::max<int64_t>(layout[u].shard, 1)) +
                      " ranks, this file's group has " + std::to_string(size));
    QUARTET_CHECK(shards[u].numel() == layout[u].shard,
                  path_ + ", group '" + group + "': the shard of unit '" + layout[u].name + "' has " +
                      std::to_string(shards[u].numel()) + " elements, the layout says " + std::to_string(layout[u].shard));
  }
  const std::string at = path_ + ", group '" + group + "'";
  H5 g = h5::group(file_, group);
  H5 type = h5_type_of(disk_dtype, at);
  const size_t esize = H5Tget_size(type.id);
  H5 dcpl{H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose};
  // Every element is written by exactly one rank: filling the datasets first would write the
  // whole file twice (parallel HDF5 allocates contiguous datasets at creation).
  H5_CHECK(H5Pset_fill_time(dcpl.id, H5D_FILL_TIME_NEVER));
  H5_CHECK(H5Pset_alloc_time(dcpl.id, H5D_ALLOC_TIME_EARLY));
  H5 xfer{H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose};
  H5_CHECK(H5Pset_dxpl_mpio(xfer.id, H5FD_MPIO_COLLECTIVE));

  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < layout.size(); ++u) {
    const UnitLayout& L = layout[u];
    // One unit at a time in host memory, already in the disk dtype (converted on the device,
    // where that is cheapest); a CPU shard of the right dtype is used in place.
    torch::Tensor host = shards[u].detach().reshape({-1}).to(disk_dtype).to(torch::kCPU).contiguous();
    const auto* base = static_cast<const char*>(host.data_ptr());
    const int64_t begin = rank * L.shard, end = begin + L.shard;
    for (const auto& p : L.params) {
      const std::string ctx = at + ", dataset '" + group + "/" + p.name + "'";
      // One watched collective per dataset: each is bounded by its own size, however large the file.
      auto watch = watched::scope(comm_, "writing " + ctx);
      H5 fs = space_of(p.shape, ctx);
      H5 set{H5_CHECK_AT(ctx, H5Dcreate2(g.id, p.name.c_str(), type.id, fs.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT)),
             H5Dclose};
      int64_t lo = 0, hi = 0;
      UnitLayout::overlap(p, begin, end, &lo, &hi);
      const int64_t count = std::max<int64_t>(hi - lo, 0);
      select_range(fs.id, p.shape, lo - p.offset, count, ctx);
      const hsize_t mdim = static_cast<hsize_t>(count);
      H5 ms{H5_CHECK_AT(ctx, H5Screate_simple(1, &mdim, nullptr)), H5Sclose};
      if (count == 0) H5_CHECK_AT(ctx, H5Sselect_none(ms.id));
      // Collective: every rank takes part in every dataset's write, with or without elements.
      H5_CHECK_AT(ctx, H5Dwrite(set.id, type.id, ms.id, fs.id, xfer.id,
                                count > 0 ? base + static_cast<size_t>(lo - begin) * esize : nullptr));
    }
  }
}

void ShardedH5Writer::attribute(const std::string& name, const std::string& value) {
  QUARTET_CHECK(file_ >= 0, path_ + ": attribute '" + name + "' after close()");
  auto watch = watched::scope(comm_, "writing attribute '" + name + "' of " + path_);
  h5::string_attr(file_, name, value);
}

void ShardedH5Writer::attribute(const std::string& name, int64_t value) {
  QUARTET_CHECK(file_ >= 0, path_ + ": attribute '" + name + "' after close()");
  auto watch = watched::scope(comm_, "writing attribute '" + name + "' of " + path_);
  h5::int_attr(file_, name, value);
}

void ShardedH5Writer::close() {
  if (file_ < 0) return;
  const hid_t f = file_;
  file_ = -1;
  auto watch = watched::scope(comm_, "closing " + path_);
  H5_CHECK_AT(path_, H5Fclose(f));
}

// ---- the reader -------------------------------------------------------------------------------

ShardedH5Reader::ShardedH5Reader(const std::string& path, MPI_Comm comm) : path_(path), comm_(comm) {
  QUARTET_CHECK(is_regular_file(path), path + ": no such file");
  H5 fapl{H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose};
  if (comm != MPI_COMM_NULL) H5_CHECK(H5Pset_fapl_mpio(fapl.id, comm, MPI_INFO_NULL));
#if H5_VERSION_GE(1, 10, 7)
  // The POSIX driver flock()s the file; parallel file systems mounted without flock support
  // would refuse the open. A checkpoint is complete (its manifest says so) before anyone reads it.
  else H5_CHECK(H5Pset_file_locking(fapl.id, 1, /*ignore_when_disabled=*/1));
#endif
  h5::Quiet quiet;
  Watchdog::Watch watch;
  if (comm != MPI_COMM_NULL) watch = watched::scope(comm, "opening " + path);
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id);
  QUARTET_CHECK(file_ >= 0, path + ": not a readable HDF5 file (truncated, damaged or of another format): " +
                                h5::error_stack());
}

ShardedH5Reader::~ShardedH5Reader() {
  if (file_ < 0) return;
  h5::Quiet quiet;
  Watchdog::Watch watch;  // closing a file opened with MPI-IO is collective
  if (comm_ != MPI_COMM_NULL) watch = watched::scope(comm_, "closing " + path_);
  H5Fclose(file_);
}

namespace {

H5 open_dataset(hid_t file, const std::string& path, const std::string& dataset) {
  h5::Quiet quiet;
  QUARTET_CHECK(h5::exists(file, dataset), path + ": no dataset '" + dataset + "'");
  return {H5_CHECK_AT(path + ", dataset '" + dataset + "'", H5Dopen2(file, dataset.c_str(), H5P_DEFAULT)), H5Dclose};
}

std::vector<int64_t> shape_of(hid_t set, const std::string& context) {
  H5 space{H5_CHECK_AT(context, H5Dget_space(set)), H5Sclose};
  const int n = H5_CHECK_AT(context, H5Sget_simple_extent_ndims(space.id));
  std::vector<hsize_t> dims(static_cast<size_t>(n));
  if (n > 0) H5_CHECK_AT(context, H5Sget_simple_extent_dims(space.id, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

}  // namespace

bool ShardedH5Reader::has(const std::string& dataset) const {
  h5::Quiet quiet;
  if (!h5::exists(file_, dataset)) return false;
  H5 obj{H5Oopen(file_, dataset.c_str(), H5P_DEFAULT), H5Oclose};
  return obj.id >= 0 && H5Iget_type(obj.id) == H5I_DATASET;
}

std::vector<int64_t> ShardedH5Reader::shape(const std::string& dataset) const {
  H5 set = open_dataset(file_, path_, dataset);
  return shape_of(set.id, path_ + ", dataset '" + dataset + "'");
}

torch::ScalarType ShardedH5Reader::dtype(const std::string& dataset) const {
  H5 set = open_dataset(file_, path_, dataset);
  H5 type{H5_CHECK_AT(path_ + ", dataset '" + dataset + "'", H5Dget_type(set.id)), H5Tclose};
  const auto t = dtype_of(type.id);
  QUARTET_CHECK(t != torch::ScalarType::Undefined,
                path_ + ", dataset '" + dataset + "': stored as a type other than float32, bfloat16 or float16");
  return t;
}

std::vector<std::string> ShardedH5Reader::names(const std::string& group) const {
  const std::string ctx = path_ + ", group '" + group + "'";
  h5::Quiet quiet;
  QUARTET_CHECK(h5::exists(file_, group), path_ + ": no group '" + group + "'");
  H5 g{H5_CHECK_AT(ctx, H5Gopen2(file_, group.c_str(), H5P_DEFAULT)), H5Gclose};
  std::vector<std::string> out;
  for (const auto& name : h5::link_names(g.id)) {
    H5 obj{H5Oopen(g.id, name.c_str(), H5P_DEFAULT), H5Oclose};
    if (obj.id >= 0 && H5Iget_type(obj.id) == H5I_DATASET) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

torch::Tensor ShardedH5Reader::read_flat(const std::string& dataset, int64_t begin, int64_t count) const {
  const std::string ctx = path_ + ", dataset '" + dataset + "'";
  H5 set = open_dataset(file_, path_, dataset);
  const auto shape = shape_of(set.id, ctx);
  const int64_t numel = numel_of(shape);
  QUARTET_CHECK(begin >= 0 && count >= 0 && begin + count <= numel,
                ctx + ": elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                    ") asked of shape " + shape_str(shape) + " (" + std::to_string(numel) + " elements)");
  H5 type{H5_CHECK_AT(ctx, H5Dget_type(set.id)), H5Tclose};
  const auto dtype = dtype_of(type.id);
  QUARTET_CHECK(dtype != torch::ScalarType::Undefined, ctx + ": stored as a type other than float32, bfloat16 or float16");
  auto out = torch::empty({count}, torch::TensorOptions().dtype(dtype));
  if (count == 0) return out;
  H5 fs{H5_CHECK_AT(ctx, H5Dget_space(set.id)), H5Sclose};
  select_range(fs.id, shape, begin, count, ctx);
  const hsize_t mdim = static_cast<hsize_t>(count);
  H5 ms{H5_CHECK_AT(ctx, H5Screate_simple(1, &mdim, nullptr)), H5Sclose};
  // The memory type is the stored type itself: the bytes arrive unconverted. Independent I/O
  // (the default transfer): each rank reads its own slices, whenever it gets to them.
  h5::Quiet quiet;
  H5_CHECK_AT(ctx, H5Dread(set.id, type.id, ms.id, fs.id, H5P_DEFAULT, out.data_ptr()));
  return out;
}

torch::Tensor ShardedH5Reader::read(const std::string& dataset) const {
  const auto s = shape(dataset);
  return read_flat(dataset, 0, numel_of(s)).view(s);
}

bool ShardedH5Reader::has_attribute(const std::string& name) const {
  h5::Quiet quiet;
  return h5::has_attr(file_, name);
}

std::string ShardedH5Reader::string_attribute(const std::string& name) const {
  h5::Quiet quiet;
  QUARTET_CHECK(h5::has_attr(file_, name), path_ + ": no root attribute '" + name + "'");
  H5 attr{H5_CHECK_AT(path_ + ", attribute '" + name + "'", H5Aopen(file_, name.c_str(), H5P_DEFAULT)), H5Aclose};
  H5 type{H5_CHECK_AT(path_ + ", attribute '" + name + "'", H5Aget_type(attr.id)), H5Tclose};
  QUARTET_CHECK(H5Tget_class(type.id) == H5T_STRING, path_ + ": root attribute '" + name + "' is not a string");
  return h5::read_string_attr(file_, name);
}

int64_t ShardedH5Reader::int_attribute(const std::string& name) const {
  h5::Quiet quiet;
  QUARTET_CHECK(h5::has_attr(file_, name), path_ + ": no root attribute '" + name + "'");
  H5 attr{H5_CHECK_AT(path_ + ", attribute '" + name + "'", H5Aopen(file_, name.c_str(), H5P_DEFAULT)), H5Aclose};
  H5 type{H5_CHECK_AT(path_ + ", attribute '" + name + "'", H5Aget_type(attr.id)), H5Tclose};
  QUARTET_CHECK(H5Tget_class(type.id) == H5T_INTEGER, path_ + ": root attribute '" + name + "' is not an integer");
  return h5::read_int_attr(file_, name, 0);
}

ParamSource ShardedH5Reader::source(const std::string& group) const {
  return [this, group](const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                       int64_t count) -> torch::Tensor {
    const std::string dataset = group + "/" + name;
    if (count == 0) {
      // The probe: name and shape, on every rank before any reads.
      QUARTET_CHECK(has(dataset), path_ + ": dataset '" + dataset + "' is missing (the model expects shape " +
                                      shape_str(shape) + ")");
      const auto found = this->shape(dataset);
      QUARTET_CHECK(found == shape, path_ + ": dataset '" + dataset + "' has shape " + shape_str(found) +
                                        ", the model expects " + shape_str(shape));
      return torch::empty({0});
    }
    return read_flat(dataset, begin, count);
  };
}

}  // namespace quartet
