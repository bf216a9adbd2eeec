#include "quartet/shard/flat_layout.hpp"

#include <algorithm>

#include "quartet/core/check.hpp"

namespace quartet {

void UnitLayout::overlap(const FlatParam& p, int64_t begin, int64_t end, int64_t* lo, int64_t* hi) {
  *lo = std::max(begin, p.offset);
  *hi = std::min(end, p.offset + p.numel);
}

std::vector<UnitLayout> make_flat_layout(const Transformer& model, int group_size) {
  QUARTET_CHECK(group_size >= 1, "make_flat_layout: group size must be positive");
  const int64_t layers = model->config().num_layers;
  std::vector<UnitLayout> units(static_cast<size_t>(layers + 1));
  units[0].name = "root";
  std::vector<std::string> prefixes;
  for (int64_t i = 0; i < layers; ++i) {
    units[static_cast<size_t>(i + 1)].name = "block " + std::to_string(i);
    prefixes.push_back(model->block_prefix(i));
  }
  for (const auto& item : model->named_parameters(true)) {
    const std::string& name = item.key();
    size_t unit = 0;
    for (size_t i = 0; i < prefixes.size(); ++i)
      if (name.compare(0, prefixes[i].size(), prefixes[i]) == 0) {
        unit = i + 1;
        break;
      }
    UnitLayout& u = units[unit];
    FlatParam p;
    p.name = name;
    p.shape = item.value().sizes().vec();
    p.numel = item.value().numel();
    p.offset = u.numel;
    // Biases and norm weights are vectors: no weight decay, as OpenRLHF and Megatron do.
    p.decay = item.value().dim() >= 2;
    u.numel += p.numel;
    u.params.push_back(std::move(p));
  }
  const int64_t quantum = kShardAlign * group_size;
  for (auto& u : units) {
    QUARTET_CHECK(u.numel > 0, "make_flat_layout: unit '" + u.name + "' has no parameters");
    u.padded = (u.numel + quantum - 1) / quantum * quantum;
    u.shard = u.padded / group_size;
  }
  return units;
}

void probe_source(const std::vector<UnitLayout>& layout, const ParamSource& source) {
  for (const auto& L : layout)
    for (const auto& p : L.params) source(p.name, p.shape, 0, 0);
}

void fill_shard(const UnitLayout& L, int rank, const ParamSource& source, const torch::Tensor& shard) {
  QUARTET_CHECK(shard.dim() == 1 && shard.numel() == L.shard,
                "fill_shard: unit '" + L.name + "' needs a 1-D shard of " + std::to_string(L.shard) +
                    " elements, got " + c10::str(shard.sizes()));
  const int64_t begin = rank * L.shard, end = begin + L.shard;
  // Only the padding (after the last parameter) needs zeros: the parameters cover the rest.
  const int64_t filled = std::min(end, L.numel);
  if (filled < end) shard.narrow(0, std::max<int64_t>(filled - begin, 0), end - std::max(filled, begin)).zero_();
  for (const auto& p : L.params) {
    int64_t lo = 0, hi = 0;
    UnitLayout::overlap(p, begin, end, &lo, &hi);
    if (lo >= hi) continue;
    torch::Tensor values = source(p.name, p.shape, lo - p.offset, hi - lo);
    QUARTET_CHECK(values.numel() == hi - lo, "sharding: the source gave " + std::to_string(values.numel()) +
                                                 " values of '" + p.name + "', expected " + std::to_string(hi - lo));
    shard.narrow(0, lo - begin, hi - lo).copy_(values.reshape({-1}));
  }
}

}  // namespace quartet
