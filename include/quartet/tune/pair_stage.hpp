#pragma once
// What the stages that learn from preference pairs share (quartet rm; dpo may use it too): the
// training files read as one dataset, a step's pairs as the engine's micro-batches and back, and
// the held-out pairs shared out over the trained group's ranks.
//   PairFiles          several pair files (tune/pair_dataset.hpp; plain or prepared) as one
//                      dataset, index i of file k after the rows of files 0..k-1; a bad file or
//                      row is a DeckError naming the deck key, the file and its line
//   pair_micro_batches a step's pairs cut into micro-batches of `micro_batch` pairs, each in
//                      make_pair_batch's layout (both sides as wide as the micro-batch's longest
//                      prompt plus its longest response); units = pairs, tokens = both sides'
//                      padded tokens
//   for_each_pair_chunk  this rank's held-out pairs, `micro_batch` at a time, with as many turns
//                      on every rank of the group (an empty turn is nullptr: the caller runs a
//                      placeholder forward through its models, so that their collectives line up)
#include <functional>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/tune/pair_dataset.hpp"
#include "quartet/tune/stage.hpp"

namespace quartet {

class PairFiles {
 public:
  // `key` names the files in errors (rm.data); `limit` > 0 keeps the first `limit` pairs
  // (more than the files hold is refused, naming `limit_key`).
  PairFiles(const std::vector<std::string>& files, const std::string& key, const Config& config,
            const Tokenizer& tokenizer, int64_t max_tokens, const TokenizerIdentity& identity,
            const PreparedFileKind& kind, int64_t limit = 0, const std::string& limit_key = "");
  int64_t size() const { return size_; }
  PreferencePair get(int64_t index) const;
  bool has_margins() const;

 private:
  std::vector<PairDataset> files_;
  std::vector<int64_t> starts_;  // the first index of each file
  int64_t size_ = 0;
};

std::vector<StageMicroBatch> pair_micro_batches(const std::vector<PreferencePair>& pairs, int64_t micro_batch,
                                                int64_t pad_id, torch::Device device);
// A micro-batch of pair_micro_batches as the batch it was made from (on its device).
PairBatch pair_batch_of(const StageMicroBatch& mb);

void for_each_pair_chunk(const std::vector<PreferencePair>& share, int64_t micro_batch, int64_t pad_id,
                         Collectives& group, const std::function<void(const PairBatch*)>& turn);

// Each rank's share of `count` held-out rows: group rank r of R takes rows r, r + R, ...
std::vector<int64_t> share_of_rows(int64_t count, int group_rank, int group_size);

}  // namespace quartet
