#pragma once
// How one model is cut into flat, evenly sharded units (ZeRO-3 / FSDP style). Unit 0 is the
// "root" (embeddings, position embeddings, final norm, head: everything outside the blocks);
// unit 1 + i is block i. A unit's parameters lie back to back in one flat buffer, padded so that
// the group splits it evenly; rank r owns elements [r * shard, (r + 1) * shard).
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "quartet/model/transformer.hpp"

namespace quartet {

struct FlatParam {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0;  // in the unit's flat buffer
  bool decay = true;            // AdamW weight decay applies (matrices; not biases and norms)
};

struct UnitLayout {
  std::string name;             // "root" or "block 3"
  std::vector<FlatParam> params;
  int64_t numel = 0;            // sum of the parameters
  int64_t padded = 0;           // numel rounded up to a multiple of kShardAlign * group size
  int64_t shard = 0;            // padded / group size: elements per rank

  // The part of [begin, end) (unit coordinates) that parameter p covers, as [lo, hi); empty
  // when lo >= hi.
  static void overlap(const FlatParam& p, int64_t begin, int64_t end, int64_t* lo, int64_t* hi);
};

// Shards are whole multiples of this many elements, so that every shard starts 64-byte aligned
// for 4-byte types (NCCL and vectorised kernels prefer it).
constexpr int64_t kShardAlign = 16;

// The units of `model` for a group of `group_size` ranks, parameters in registration order.
std::vector<UnitLayout> make_flat_layout(const Transformer& model, int group_size);

// Values for shards: elements [begin, begin + count) of parameter `name` flattened (see
// sharded_model.hpp, which documents the contract; this is the same type).
using ParamSource = std::function<torch::Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                                int64_t begin, int64_t count)>;
// Asks `source` about every parameter with zero elements, on every rank, before any rank reads
// its slices: a missing or misshapen tensor then fails on all ranks alike, not only on those
// whose shard it overlaps (the others would wait for them in the next collective).
void probe_source(const std::vector<UnitLayout>& layout, const ParamSource& source);
// Fills `shard` (rank `rank`'s unit.shard elements of `unit`, any dtype and device) from
// `source`, one slice per parameter it overlaps; the padding is zeroed.
void fill_shard(const UnitLayout& unit, int rank, const ParamSource& source, const torch::Tensor& shard);

}  // namespace quartet
