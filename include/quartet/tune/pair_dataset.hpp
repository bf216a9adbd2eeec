#pragma once
// The preference pairs of a run (reward-model training, DPO), from a plain or a prepared pairs
// file (io/pairs.hpp), and the batches the pairwise stages run on.
//
// The file is read whole when the dataset is made, and every row is checked then, naming its
// file and line: a malformed row, an id outside the tokenizer's vocabulary, a side (the prompt
// and one response) of more than max_tokens tokens (refused, never cut: a cut response is
// another response), a response without tokens, chosen and rejected with the same ids. Plain
// rows are tokenized there with the run's tokenizer, as prepare_pairs.py tokenizes raw rows: the
// prompt with the special tokens the tokenizer adds (a BOS, say; as `train` tokenizes a plain
// prompt), each response without them and followed by the tokenizer's end-of-sequence token
// when it has one (the token generation stops at). Prepared rows are used as they are.
// Whether a prepared file was made for the model's tokenizer and chat template is
// pair_file_misfit's question (ask it before any model is built); given an identity, the
// dataset asks it too and refuses a misfit.
//
// A batch (make_pair_batch) holds each pair twice in the RolloutBatch shape rl/ uses for
// rollouts: the prompt left-padded to the batch's longest, then the response right-padded to
// the longest response of either side; action_mask marks the response tokens. The chosen and
// the rejected rows have the same widths, so that both_sides() can run them as one batch.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "quartet/engine/experience.hpp"
#include "quartet/io/pairs.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

struct PreferencePair {
  int64_t index = -1;  // the dataset index: the 0-based pair among the file's rows
  std::vector<int64_t> prompt, chosen, rejected;
  double margin = 0;  // 0 for a row without one
};

// "" when `path` is a plain pairs file, or a prepared one made for `model`'s tokenizer and
// template; else what differs (io/prompt_identity.hpp's prepared_file_misfit), naming the file
// and line. A malformed header is a quartet::Error.
std::string pair_file_misfit(const std::string& path, const TokenizerIdentity& model,
                             const PreparedFileKind& kind);

class PairDataset {
 public:
  // `tokenizer` must outlive the dataset only for the constructor (plain rows are tokenized
  // here). `identity`, when given: a prepared file made for another tokenizer or template is
  // refused (`kind` words the message).
  PairDataset(const std::string& path, const Tokenizer& tokenizer, int64_t max_tokens,
              const TokenizerIdentity* identity = nullptr, const PreparedFileKind& kind = {"pairs", "model", "prepare_pairs.py"});
  int64_t size() const { return static_cast<int64_t>(lines_.size()); }
  PreferencePair get(int64_t index) const;
  std::vector<PreferencePair> get(const std::vector<int64_t>& indices) const;
  // "path:line" of pair `index`, for messages.
  std::string where(int64_t index) const;
  bool prepared() const { return prepared_; }
  bool has_margins() const { return margins_given_ > 0; }
  const std::string& path() const { return path_; }

 private:
  void add(std::vector<int64_t> prompt, std::vector<int64_t> chosen, std::vector<int64_t> rejected,
           std::optional<double> margin, int64_t line, int64_t vocab);
  std::string path_;
  int64_t max_tokens_;
  bool prepared_ = false;
  int64_t margins_given_ = 0;
  // The ids of every pair end to end (int32: half the memory of a large dataset); pair i's
  // prompt, chosen and rejected ids begin at offsets_[3i], [3i + 1], [3i + 2] and end where the
  // next begins.
  std::vector<int32_t> tokens_;
  std::vector<int64_t> offsets_{0};
  std::vector<double> margins_;
  std::vector<int64_t> lines_;  // 1-based file line of each pair
};

struct PairBatch {
  RolloutBatch chosen, rejected;  // [N, P + A] each, action_mask [N, A]
  torch::Tensor margin;           // float32 [N] (0 where a pair has none)
  std::vector<int64_t> index;     // the pairs' dataset indices
  int64_t rows() const { return chosen.rows(); }
};

// The pairs as a batch (CPU tensors); pad_id fills the padding. max_width > 0 pads the action
// width up to engine/experience.hpp's width buckets (bucketed_actions), so that a run meets few
// distinct shapes.
PairBatch make_pair_batch(const std::vector<PreferencePair>& pairs, int64_t pad_id, int64_t max_width = 0);
// Chosen rows then rejected rows, [2N, P + A]: one forward pass for both sides.
RolloutBatch both_sides(const PairBatch& batch);
// A result over both_sides()'s rows ([2N, ...]) split into the chosen rows and the rejected ones.
std::pair<torch::Tensor, torch::Tensor> split_sides(const torch::Tensor& values);

}  // namespace quartet
