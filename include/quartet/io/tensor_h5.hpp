#pragma once
// Named tensors to and from a plain HDF5 file (one dataset each, native dtype and shape), for
// artefacts others verify by hand or from Python with h5py: `quartet generate --logits`.
#include <string>

#include "quartet/model/safetensors.hpp"

namespace quartet {

// float32/float64/int64/int32/uint8/bool tensors (bf16 and f16 are stored as float32).
void write_tensors_h5(const std::string& path, const NamedTensors& tensors);
torch::Tensor read_tensor_h5(const std::string& path, const std::string& name);

}  // namespace quartet
