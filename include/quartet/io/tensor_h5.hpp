#pragma once
// Named tensors to and from a plain HDF5 file (one dataset each, native dtype and shape), for
// artefacts others verify by hand or from Python with h5py: `quartet generate --logits`.
#include <map>
#include <string>

#include "quartet/model/safetensors.hpp"

namespace quartet {

// float32/float64/int64/int32/uint8/bool tensors (bf16 and f16 are stored as float32), and
// string attributes on the file's root.
void write_tensors_h5(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& attributes = {});
// A missing dataset or a file that is not HDF5 is a quartet::Error naming the file and dataset.
torch::Tensor read_tensor_h5(const std::string& path, const std::string& name);
bool has_tensor_h5(const std::string& path, const std::string& name);
// A root string attribute; "" when the file has none of that name.
std::string read_attribute_h5(const std::string& path, const std::string& name);

}  // namespace quartet
