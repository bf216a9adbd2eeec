// Group-to-group exchange. Each call posts all of this rank's sends before it blocks on anything,
// so no pair of ranks can wait on each other and a rank in both groups can send to itself.
#include "quartet/dist/exchange.hpp"

#include <mpi.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <sstream>

#include "quartet/core/check.hpp"

namespace quartet {
namespace {

// MPI counts are int, so a tensor's bytes travel in messages of at most this size.
constexpr std::int64_t kMaxChunk = std::int64_t{1} << 30;

int index_in(const std::vector<int>& group, int rank) {
  auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : static_cast<int>(it - group.begin());
}

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::int64_t rows_in(const Batch& b) { return b.empty() ? 0 : b[0].size(0); }

// The header carries only one row count, so a batch whose tensors disagree cannot be described.
std::int64_t checked_rows(const Batch& b, const std::string& what) {
  for (std::size_t k = 0; k < b.size(); ++k) {
    const std::string tensor = what + ": tensor " + std::to_string(k);
    QUARTET_CHECK(b[k].defined(), tensor + " is undefined");
    QUARTET_CHECK(b[k].dim() >= 1, tensor + " has shape " + shape_of(b[k]) +
                                       "; every tensor needs a row dimension (dim 0)");
    QUARTET_CHECK(b[k].size(0) == b[0].size(0),
                  tensor + " has shape " + shape_of(b[k]) + " but tensor 0 has shape " +
                      shape_of(b[0]) + "; all tensors of a batch must share dim 0 (rows)");
  }
  return rows_in(b);
}

// Calls f(pointer, bytes) for each chunk of a contiguous CPU tensor; none if it has no bytes.
template <class F>
void for_each_chunk(const torch::Tensor& t, F f) {
  char* base = static_cast<char*>(t.data_ptr());
  const auto bytes = static_cast<std::int64_t>(t.nbytes());
  for (std::int64_t off = 0; off < bytes; off += kMaxChunk)
    f(base + off, static_cast<int>(std::min(kMaxChunk, bytes - off)));
}

}  // namespace

// One direction of one call, seen from this rank (outside the anonymous namespace:
// GroupExchange::Posted holds one). It owns the send buffers until finish(); if an error escapes
// before then, the job is being aborted anyway (see core/check.hpp).
class Transfer {
 public:
  Transfer(MPI_Comm comm, int tag, Watchdog* watchdog, const std::string& what)
      : comm_(comm), tag_(tag), what_(what) {
    if (watchdog) watch_.emplace(watchdog->watch(what));
  }

  void send(int peer, const Batch& batch) {
    Message& m = out_.emplace_back();
    m.peer = peer;
    std::vector<std::int64_t>& h = m.header;
    h = {static_cast<std::int64_t>(batch.size()), rows_in(batch)};
    for (const auto& t : batch) {
      // The bytes must be the logical values: no GPU memory, strides, or lazy conj/neg bits.
      m.data.push_back(t.to(torch::kCPU).resolve_conj().resolve_neg().contiguous());
      h.insert(h.end(), {static_cast<std::int64_t>(t.scalar_type()), t.dim()});
      h.insert(h.end(), t.sizes().begin(), t.sizes().end());
    }
    // Until a receive below or finish() says more: the sends are posted and may go untaken.
    if (watch_) watch_->status("waiting for world rank " + std::to_string(peer) + " to take its data", peer);
    MPI_Request r;
    MPI_CHECK(MPI_Isend(h.data(), static_cast<int>(h.size()), MPI_INT64_T, peer, tag_, comm_, &r));
    m.requests.push_back(r);
    for (const auto& t : m.data) {
      for_each_chunk(t, [&](char* p, int n) {
        MPI_CHECK(MPI_Isend(p, n, MPI_BYTE, peer, tag_, comm_, &r));
        m.requests.push_back(r);
      });
    }
  }

  // One batch from each peer, in the given order, as CPU tensors. Each piece's data receives are
  // posted as soon as its header is in, so large pieces flow while later headers are awaited.
  std::vector<Batch> receive(const std::vector<int>& peers) {
    std::vector<Message> in;
    for (int peer : peers) in.push_back(post_receive(peer));
    std::vector<Batch> got;
    for (auto& m : in) {
      wait(m, "waiting for data from world rank " + std::to_string(m.peer), m.peer);
      got.push_back(std::move(m.data));
    }
    return got;
  }

  void finish() {
    for (auto& m : out_)
      wait(m, "waiting for world rank " + std::to_string(m.peer) + " to take its data", m.peer);
    out_.clear();
  }

 private:
  struct Message {
    int peer = -1;
    std::vector<std::int64_t> header;
    Batch data;
    std::vector<MPI_Request> requests;
  };

  void wait(Message& m, const std::string& status, int peer) {
    if (watch_) watch_->status(status, peer);
    MPI_CHECK(
        MPI_Waitall(static_cast<int>(m.requests.size()), m.requests.data(), MPI_STATUSES_IGNORE));
  }

  Message post_receive(int peer) {
    if (watch_) watch_->status("waiting for the header from world rank " + std::to_string(peer), peer);
    MPI_Message msg;
    MPI_Status st;
    MPI_CHECK(MPI_Mprobe(peer, tag_, comm_, &msg, &st));
    int count = 0;
    MPI_CHECK(MPI_Get_count(&st, MPI_INT64_T, &count));
    // Only a stray message on our tag could fail these checks: tags must be unique per exchange.
    const std::string bad = what_ + ": malformed header from world rank " + std::to_string(peer) +
                            " (is another exchange using the same tag?)";
    QUARTET_CHECK(count >= 2, bad);
    Message m;
    m.peer = peer;
    std::vector<std::int64_t>& h = m.header;
    h.resize(static_cast<std::size_t>(count));
    MPI_CHECK(MPI_Mrecv(h.data(), count, MPI_INT64_T, &msg, MPI_STATUS_IGNORE));

    std::size_t pos = 2;
    for (std::int64_t k = 0; k < h[0]; ++k) {
      QUARTET_CHECK(pos + 2 <= h.size(), bad);
      const std::int64_t type = h[pos], ndim = h[pos + 1];
      pos += 2;
      QUARTET_CHECK(type >= 0 && type < static_cast<std::int64_t>(c10::ScalarType::NumOptions) &&
                        ndim >= 1 && static_cast<std::int64_t>(h.size() - pos) >= ndim,
                    bad);
      const std::vector<std::int64_t> dims(h.begin() + pos, h.begin() + pos + ndim);
      pos += static_cast<std::size_t>(ndim);
      QUARTET_CHECK(dims[0] == h[1] && *std::min_element(dims.begin(), dims.end()) >= 0, bad);
      m.data.push_back(torch::empty(dims, torch::dtype(static_cast<c10::ScalarType>(type))));
      for_each_chunk(m.data.back(), [&](char* p, int n) {
        MPI_Request r;
        MPI_CHECK(MPI_Irecv(p, n, MPI_BYTE, peer, tag_, comm_, &r));
        m.requests.push_back(r);
      });
    }
    QUARTET_CHECK(h[0] >= 0 && pos == h.size(), bad);
    return m;
  }

  MPI_Comm comm_;
  int tag_;
  std::string what_;
  std::optional<Watchdog::Watch> watch_;
  std::deque<Message> out_;  // a deque: the buffers of posted sends must not move
};

namespace {

// What the watchdog's report calls this call: "exchange 'x' forward (source 1 of 3)".
std::string describe(const std::string& name, const char* direction, int si, int ns, int di,
                     int nd) {
  std::string s = "exchange '" + name + "' " + direction + " (";
  if (si >= 0) s += "source " + std::to_string(si) + " of " + std::to_string(ns);
  if (si >= 0 && di >= 0) s += ", ";
  if (di >= 0) s += "destination " + std::to_string(di) + " of " + std::to_string(nd);
  return s + ")";
}

std::vector<int> world_ranks(const std::vector<int>& group, const std::vector<int>& indices) {
  std::vector<int> ranks;
  for (int i : indices) ranks.push_back(group[static_cast<std::size_t>(i)]);
  return ranks;
}

Batch to_device(Batch b, torch::Device device) {
  for (auto& t : b) t = t.to(device);
  return b;
}

}  // namespace

GroupExchange::GroupExchange(const World& world, std::string name, std::vector<int> src,
                             std::vector<int> dst, int tag, torch::Device device,
                             Watchdog* watchdog)
    : world_(world),
      name_(std::move(name)),
      src_(std::move(src)),
      dst_(std::move(dst)),
      tag_(tag),
      device_(device),
      watchdog_(watchdog) {
  const std::string what = "exchange '" + name_ + "'";
  QUARTET_CHECK(!src_.empty() && !dst_.empty(), what + ": both groups need at least one rank");
  for (const auto* group : {&src_, &dst_}) {
    for (int r : *group) {
      QUARTET_CHECK(r >= 0 && r < world_.size(), what + ": world rank " + std::to_string(r) +
                                                     " is outside the world of " +
                                                     std::to_string(world_.size()));
      QUARTET_CHECK(std::count(group->begin(), group->end(), r) == 1,
                    what + ": world rank " + std::to_string(r) + " appears twice in one group");
    }
  }
  int* tag_ub = nullptr;
  int has_ub = 0;
  MPI_CHECK(MPI_Comm_get_attr(world_.comm(), MPI_TAG_UB, &tag_ub, &has_ub));
  QUARTET_CHECK(tag_ >= 0 && (!has_ub || 2LL * tag_ + 1 <= *tag_ub),
                what + ": tag " + std::to_string(tag_) +
                    " is out of range (it uses MPI tags 2*tag and 2*tag+1)");
}

std::vector<int> GroupExchange::destinations_of(int src_index, int num_src, int num_dst) {
  QUARTET_CHECK(num_src > 0 && num_dst > 0 && src_index >= 0 && src_index < num_src,
                "bad route query: source " + std::to_string(src_index) + " of " +
                    std::to_string(num_src) + " to " + std::to_string(num_dst) + " destinations");
  if (num_src >= num_dst) return {src_index % num_dst};
  std::vector<int> to;
  for (int j = src_index; j < num_dst; j += num_src) to.push_back(j);
  return to;
}

std::vector<int> GroupExchange::sources_of(int dst_index, int num_src, int num_dst) {
  QUARTET_CHECK(num_src > 0 && num_dst > 0 && dst_index >= 0 && dst_index < num_dst,
                "bad route query: destination " + std::to_string(dst_index) + " of " +
                    std::to_string(num_dst) + " from " + std::to_string(num_src) + " sources");
  if (num_src < num_dst) return {dst_index % num_src};
  std::vector<int> from;
  for (int i = dst_index; i < num_src; i += num_dst) from.push_back(i);
  return from;
}

struct GroupExchange::Posted {
  std::unique_ptr<Transfer> transfer;
};

GroupExchange::~GroupExchange() {
  try {
    finish_sends();
  } catch (...) {
    // A destructor cannot report; the watchdog or MPI's own errors have spoken already.
  }
}

void GroupExchange::finish_sends() {
  if (!posted_) return;
  auto p = std::move(posted_);
  p->transfer->finish();
}

void GroupExchange::backward_posted(const std::vector<Batch>& results) {
  QUARTET_CHECK(index_in(src_, world_.rank()) < 0,
                "exchange '" + name_ + "': backward_posted() is for ranks that are only destinations");
  backward_impl(results, /*wait=*/false);
}

std::vector<Batch> GroupExchange::forward(const Batch& mine) {
  finish_sends();
  const int ns = static_cast<int>(src_.size()), nd = static_cast<int>(dst_.size());
  const int si = index_in(src_, world_.rank()), di = index_in(dst_, world_.rank());
  if (si < 0 && di < 0) return {};
  const std::string what = "exchange '" + name_ + "' forward";
  Transfer x(world_.exchange_comm(), 2 * tag_, watchdog_,
             describe(name_, "forward", si, ns, di, nd));

  if (si >= 0) {
    checked_rows(mine, what);
    const std::vector<int> to = destinations_of(si, ns, nd);
    std::vector<Batch> pieces(to.size());
    if (to.size() == 1) {
      pieces[0] = mine;
    } else {
      for (const auto& t : mine) {
        auto parts = torch::tensor_split(t, static_cast<std::int64_t>(to.size()), 0);
        for (std::size_t p = 0; p < to.size(); ++p) pieces[p].push_back(parts[p]);
      }
    }
    sent_rows_.clear();
    for (std::size_t p = 0; p < to.size(); ++p) {
      sent_rows_.push_back(rows_in(pieces[p]));
      x.send(dst_[static_cast<std::size_t>(to[p])], pieces[p]);
    }
  }

  std::vector<Batch> got;
  if (di >= 0) {
    got = x.receive(world_ranks(src_, sources_of(di, ns, nd)));
    received_rows_.clear();
    for (auto& piece : got) {
      received_rows_.push_back(rows_in(piece));
      piece = to_device(std::move(piece), device_);
    }
  }
  x.finish();
  return got;
}

Batch GroupExchange::backward(const std::vector<Batch>& results) { return backward_impl(results, true); }

Batch GroupExchange::backward_impl(const std::vector<Batch>& results, bool wait) {
  finish_sends();
  const int ns = static_cast<int>(src_.size()), nd = static_cast<int>(dst_.size());
  const int si = index_in(src_, world_.rank()), di = index_in(dst_, world_.rank());
  if (si < 0 && di < 0) return {};
  const std::string what = "exchange '" + name_ + "' backward";
  auto transfer = std::make_unique<Transfer>(world_.exchange_comm(), 2 * tag_ + 1, watchdog_,
                                             describe(name_, "backward", si, ns, di, nd));
  Transfer& x = *transfer;

  if (di >= 0) {
    const std::vector<int> to = world_ranks(src_, sources_of(di, ns, nd));
    QUARTET_CHECK(received_rows_.size() == to.size(), what + " before any forward()");
    QUARTET_CHECK(results.size() == to.size(),
                  what + ": got " + std::to_string(results.size()) + " result batches for the " +
                      std::to_string(to.size()) + " pieces received in forward()");
    // All checks before the first send: a failing rank must not leave half its messages posted.
    for (std::size_t p = 0; p < to.size(); ++p) {
      const std::string piece = what + ": result for piece " + std::to_string(p) +
                                " (from world rank " + std::to_string(to[p]) + ")";
      const std::int64_t rows = checked_rows(results[p], piece);
      QUARTET_CHECK(rows == received_rows_[p],
                    piece + " has " + std::to_string(rows) + " rows, expected " +
                        std::to_string(received_rows_[p]) + " (the rows of that piece)");
    }
    for (std::size_t p = 0; p < to.size(); ++p) x.send(to[p], results[p]);
  }

  Batch mine;
  if (si >= 0) {
    const std::vector<int> from = world_ranks(dst_, destinations_of(si, ns, nd));
    QUARTET_CHECK(sent_rows_.size() == from.size(), what + " before any forward()");
    std::vector<Batch> pieces = x.receive(from);
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      const std::string piece =
          what + ": world rank " + std::to_string(from[p]) + " answered piece " + std::to_string(p);
      QUARTET_CHECK(rows_in(pieces[p]) == sent_rows_[p],
                    piece + " with " + std::to_string(rows_in(pieces[p])) + " rows, but it had " +
                        std::to_string(sent_rows_[p]));
      QUARTET_CHECK(pieces[p].size() == pieces[0].size(),
                    piece + " with " + std::to_string(pieces[p].size()) +
                        " tensors, but piece 0 has " + std::to_string(pieces[0].size()));
    }
    if (pieces.size() == 1) {
      mine = std::move(pieces[0]);
    } else {
      for (std::size_t k = 0; k < pieces[0].size(); ++k) {
        std::vector<torch::Tensor> parts;
        for (const auto& piece : pieces) parts.push_back(piece[k]);
        mine.push_back(torch::cat(parts, 0));
      }
    }
    mine = to_device(std::move(mine), device_);
  }
  if (!wait) {
    posted_ = std::make_unique<Posted>();
    posted_->transfer = std::move(transfer);
    return mine;
  }
  x.finish();
  return mine;
}

}  // namespace quartet
