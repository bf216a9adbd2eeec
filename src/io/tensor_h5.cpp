#include "quartet/io/tensor_h5.hpp"

#include <hdf5.h>

#include <cstdio>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/io/h5.hpp"

namespace quartet {
namespace {

hid_t h5_type(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return H5T_NATIVE_FLOAT;
    case c10::kDouble: return H5T_NATIVE_DOUBLE;
    case c10::kLong: return H5T_NATIVE_INT64;
    case c10::kInt: return H5T_NATIVE_INT32;
    case c10::kByte: case c10::kBool: return H5T_NATIVE_UINT8;
    default: return -1;
  }
}

// Closes an HDF5 handle when it goes out of scope, so an error midway leaks nothing.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() { if (id >= 0) close(id); }
};

// Opens `path` read-only, naming it when it is not a readable HDF5 file.
hid_t open_read_only(const std::string& path) {
  h5::Quiet quiet;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  QUARTET_CHECK(f >= 0, path + ": not a readable HDF5 file (missing, truncated, damaged or of another format)");
  return f;
}

}  // namespace

void write_tensors_h5(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& attributes) {
  // Written under a temporary name and renamed: a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    Handle file{H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose};
    for (const auto& [name, tensor] : tensors) {
      auto t = tensor.detach().to(torch::kCPU);
      if (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf) t = t.to(torch::kFloat);
      if (t.scalar_type() == torch::kBool) t = t.to(torch::kByte);
      t = t.contiguous();
      hid_t type = h5_type(t.scalar_type());
      QUARTET_CHECK(type >= 0, path + ": cannot store " + name + " of type " +
                                   c10::toString(t.scalar_type()));
      std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
      Handle space{H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose};
      Handle set{H5_CHECK(H5Dcreate2(file.id, name.c_str(), type, space.id, H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT)), H5Dclose};
      if (t.numel() > 0) H5_CHECK(H5Dwrite(set.id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()));
    }
    for (const auto& [name, value] : attributes) h5::string_attr(file.id, name, value);
  }
  QUARTET_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename " + tmp + " to " + path);
  // (HDF5 writes through its own file handle, so write_file_atomically does not fit here.)
}

bool has_tensor_h5(const std::string& path, const std::string& name) {
  Handle file{open_read_only(path), H5Fclose};
  h5::Quiet quiet;
  return h5::exists(file.id, name);
}

std::string read_attribute_h5(const std::string& path, const std::string& name) {
  Handle file{open_read_only(path), H5Fclose};
  h5::Quiet quiet;
  return h5::read_string_attr(file.id, name);
}

torch::Tensor read_tensor_h5(const std::string& path, const std::string& name) {
  Handle file{open_read_only(path), H5Fclose};
  {
    h5::Quiet quiet;
    QUARTET_CHECK(h5::exists(file.id, name), path + ": no dataset '" + name + "'");
  }
  Handle set{H5_CHECK(H5Dopen2(file.id, name.c_str(), H5P_DEFAULT)), H5Dclose};
  Handle space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
  int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.id));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5_CHECK(H5Sget_simple_extent_dims(space.id, dims.data(), nullptr));
  Handle type{H5_CHECK(H5Dget_type(set.id)), H5Tclose};
  c10::ScalarType st;
  hid_t mem;
  if (H5Tequal(type.id, H5T_NATIVE_FLOAT) > 0) st = c10::kFloat, mem = H5T_NATIVE_FLOAT;
  else if (H5Tequal(type.id, H5T_NATIVE_DOUBLE) > 0) st = c10::kDouble, mem = H5T_NATIVE_DOUBLE;
  else if (H5Tequal(type.id, H5T_NATIVE_INT64) > 0) st = c10::kLong, mem = H5T_NATIVE_INT64;
  else if (H5Tequal(type.id, H5T_NATIVE_INT32) > 0) st = c10::kInt, mem = H5T_NATIVE_INT32;
  else if (H5Tequal(type.id, H5T_NATIVE_UINT8) > 0) st = c10::kByte, mem = H5T_NATIVE_UINT8;
  else fail(__FILE__, __LINE__, path + ": dataset " + name + " has a type quartet does not read");
  std::vector<int64_t> shape(dims.begin(), dims.end());
  auto t = torch::empty(shape, torch::TensorOptions().dtype(st));
  if (t.numel() > 0) H5_CHECK(H5Dread(set.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()));
  return t;
}

}  // namespace quartet
