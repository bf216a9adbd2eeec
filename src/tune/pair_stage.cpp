#include "quartet/tune/pair_stage.hpp"

#include <torch/types.h>

#include <algorithm>

#include "quartet/core/check.hpp"
#include "quartet/engine/experience.hpp"

namespace quartet {

PairFiles::PairFiles(const std::vector<std::string>& files, const std::string& key, const Config& config,
                     const Tokenizer& tokenizer, int64_t max_tokens, const TokenizerIdentity& identity,
                     const PreparedFileKind& kind, int64_t limit, const std::string& limit_key) {
  for (const std::string& path : files) {
    if (limit > 0 && size_ >= limit) break;
    try {
      files_.emplace_back(path, tokenizer, max_tokens, &identity, kind);
    } catch (const DeckError&) {
      throw;
    } catch (const Error& e) {
      config.deck.fail(key, "names '" + path + "': " + e.what());
    }
    starts_.push_back(size_);
    size_ += files_.back().size();
  }
  if (limit > size_)
    config.deck.fail(limit_key, "is " + std::to_string(limit) + ", but " + key + " holds " + std::to_string(size_) +
                                    " pairs");
  if (limit > 0) size_ = limit;
}

PreferencePair PairFiles::get(int64_t index) const {
  QUARTET_CHECK(index >= 0 && index < size_, "pair " + std::to_string(index) + " is outside 0.." +
                                                 std::to_string(size_ - 1));
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
  PreferencePair p = files_[k].get(index - starts_[k]);
  p.index = index;
  return p;
}

bool PairFiles::has_margins() const {
  return std::any_of(files_.begin(), files_.end(), [](const PairDataset& f) { return f.has_margins(); });
}

std::vector<StageMicroBatch> pair_micro_batches(const std::vector<PreferencePair>& pairs, int64_t micro_batch,
                                                int64_t pad_id, torch::Device device) {
  std::vector<StageMicroBatch> out;
  for (size_t begin = 0; begin < pairs.size(); begin += static_cast<size_t>(micro_batch)) {
    const size_t end = std::min(pairs.size(), begin + static_cast<size_t>(micro_batch));
    const std::vector<PreferencePair> part(pairs.begin() + static_cast<std::ptrdiff_t>(begin),
                                           pairs.begin() + static_cast<std::ptrdiff_t>(end));
    const PairBatch b = make_pair_batch(part, pad_id);
    const RolloutBatch c = on_device(b.chosen, device), r = on_device(b.rejected, device);
    StageMicroBatch mb;
    mb.tensors = {c.sequences, c.attention_mask, c.action_mask, r.sequences, r.attention_mask, r.action_mask,
                  b.margin.to(device)};
    mb.units = static_cast<double>(part.size());
    mb.tokens = (b.chosen.attention_mask.sum() + b.rejected.attention_mask.sum()).item<int64_t>();  // real, as sft's
    out.push_back(std::move(mb));
  }
  return out;
}

PairBatch pair_batch_of(const StageMicroBatch& mb) {
  QUARTET_CHECK(mb.tensors.size() == 7, "pair_batch_of: a micro-batch of pairs has 7 tensors, this one " +
                                            std::to_string(mb.tensors.size()));
  PairBatch b;
  b.chosen = {mb.tensors[0], mb.tensors[1], mb.tensors[2]};
  b.rejected = {mb.tensors[3], mb.tensors[4], mb.tensors[5]};
  b.margin = mb.tensors[6];
  return b;
}

void for_each_pair_chunk(const std::vector<PreferencePair>& share, int64_t micro_batch, int64_t pad_id,
                         Collectives& group, const std::function<void(const PairBatch*)>& turn) {
  const int64_t n = static_cast<int64_t>(share.size());
  const int64_t mine = (n + micro_batch - 1) / micro_batch, turns = group_max(group, mine);
  for (int64_t k = 0; k < turns; ++k) {
    if (k >= mine) {
      turn(nullptr);
      continue;
    }
    const int64_t begin = k * micro_batch, end = std::min(n, begin + micro_batch);
    const PairBatch b = make_pair_batch(std::vector<PreferencePair>(share.begin() + begin, share.begin() + end), pad_id);
    turn(&b);
  }
}

std::vector<int64_t> share_of_rows(int64_t count, int group_rank, int group_size) {
  std::vector<int64_t> out;
  for (int64_t i = group_rank; group_rank >= 0 && i < count; i += group_size) out.push_back(i);
  return out;
}

}  // namespace quartet
