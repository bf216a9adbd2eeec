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

}  // namespace quartet
