#pragma once
// Group-to-group exchange over MPI: the rollout path. Sequences, masks and scores have sizes
// that change every iteration, so each message carries its shapes and dtypes ahead of the data.
//
// The route between a source group of S ranks and a destination group of D ranks is fixed:
//   S >= D: source i sends its whole batch to destination i % D; destination j receives one
//           piece from each source i with i % D == j, in increasing i.
//   S <  D: source i splits its batch by rows (dim 0, near-equal parts, torch::tensor_split)
//           among the destinations j with j % S == i, in increasing j; each destination receives
//           exactly one piece.
// backward() sends results along the same route in reverse: each destination returns one result
// batch per piece it received (same row count), and each source gets the rows of its own batch
// back, concatenated in its original order. A rank may be in both groups (colocated placement).
//
// On the wire (tag 2*tag forward, 2*tag+1 backward): an int64 header (tensor count, rows, then
// per tensor its dtype, ndim and dims), then each tensor's bytes in chunks of at most 1 GiB.
// Every tensor of a batch has at least one dimension and the same dim 0; any dtype goes through
// bit-exactly; a piece may have 0 rows.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quartet/dist/watchdog.hpp"
#include "quartet/dist/world.hpp"

namespace quartet {

// Tensors that share their first dimension (rows): one rollout batch and its companions.
using Batch = std::vector<torch::Tensor>;

class GroupExchange {
 public:
  // `src` and `dst`: world ranks of the two groups, in group order. `tag` distinguishes this
  // exchange from others on world.exchange_comm(); received tensors land on `device`.
  GroupExchange(const World& world, std::string name, std::vector<int> src, std::vector<int> dst,
                int tag, torch::Device device, Watchdog* watchdog = nullptr);

  // Called by every rank of either group (others may call it and get {}). Source ranks pass
  // their batch; destination ranks get their incoming pieces in route order.
  std::vector<Batch> forward(const Batch& mine);
  // Destination ranks pass one result batch per received piece; source ranks get their rows back.
  Batch backward(const std::vector<Batch>& results);
  // Destination ranks only: backward() that returns as soon as the results are posted, so the
  // rank can go on (to the next forward of another exchange) while the sources are still busy.
  // finish_sends() waits for the sources to take them; the next call on this exchange and the
  // destructor do too.
  void backward_posted(const std::vector<Batch>& results);
  void finish_sends();
  ~GroupExchange();
  GroupExchange(const GroupExchange&) = delete;
  GroupExchange& operator=(const GroupExchange&) = delete;

  // The route, by group index: where source i sends, where destination j receives from.
  static std::vector<int> destinations_of(int src_index, int num_src, int num_dst);
  static std::vector<int> sources_of(int dst_index, int num_src, int num_dst);

  const std::string& name() const { return name_; }

 private:
  const World& world_;
  std::string name_;
  std::vector<int> src_, dst_;
  int tag_;
  torch::Device device_;
  Watchdog* watchdog_;
  // Row counts of the pieces this rank sent (as a source) and received (as a destination) in the
  // last forward(): backward() must answer each piece with exactly as many rows.
  std::vector<std::int64_t> sent_rows_;
  std::vector<std::int64_t> received_rows_;
  struct Posted;                    // sends of backward_posted() not yet taken
  std::unique_ptr<Posted> posted_;
  Batch backward_impl(const std::vector<Batch>& results, bool wait);
};

}  // namespace quartet
