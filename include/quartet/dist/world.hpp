#pragma once
// The MPI world: one rank per GPU (or per CPU slot). Order of start-up, as llm.c does it:
// MPI -> local rank (from a host hash) -> device selection -> only then NCCL and CUDA work.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace quartet {

class World {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE: the watchdog thread may abort the job while the main
  // thread sits in a collective) unless it is already up, and works out the local rank.
  World(int* argc, char*** argv);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks of this host
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  std::uint64_t host_hash() const { return host_hash_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }
  // A private duplicate of MPI_COMM_WORLD for point-to-point exchanges between groups, so their
  // tags never meet a library's or a test's traffic.
  MPI_Comm exchange_comm() const { return exchange_comm_; }
  // Another duplicate, for the watchdogs' roll call (dist/watchdog.hpp); MPI_COMM_NULL when the
  // library lacks MPI_THREAD_MULTIPLE, which the roll call's thread needs.
  MPI_Comm watchdog_comm() const { return watchdog_comm_; }

  // True on every rank iff `ok` is true on every rank: ranks agree before they act on an error.
  bool all_ok(bool ok) const;
  // Host hash of every rank, in rank order.
  std::vector<std::uint64_t> all_host_hashes() const { return host_hashes_; }
  // Runs `step` on every rank; if it threw on any rank, every rank learns so and returns false
  // (rank 0 prints its error, or a failing rank prints its own when rank 0 had none). For the
  // checks made before any real work, so that a bad deck ends the job cleanly on all ranks.
  // `step` is rank-local (dist/rank_local.hpp): a collective begun in it ends the job, named.
  bool agree(const std::function<void()>& step) const;
  // As agree, for a step in which every rank runs the same collectives and any error is thrown
  // on every rank alike, after them (the choice of the checkpoint to resume from).
  bool agree_collectively(const std::function<void()>& step) const;
  // Ends the whole job now (MPI_Abort on the world).
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  std::uint64_t host_hash_ = 0;
  std::vector<std::uint64_t> host_hashes_;
  MPI_Comm exchange_comm_ = MPI_COMM_NULL;
  MPI_Comm watchdog_comm_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
  bool thread_multiple_ = false;
};

// Identifies a host the way nccl-tests does: the hostname and the kernel's boot id, so that two
// containers with one hostname on different machines still differ.
std::uint64_t host_hash(const std::string& hostname, const std::string& boot_id);
// This machine's hostname and boot id.
std::string this_hostname();
std::string this_boot_id();
// The rank's position among earlier ranks with the same hash, and how many share it.
int local_rank_of(const std::vector<std::uint64_t>& hashes, int rank);
int local_size_of(const std::vector<std::uint64_t>& hashes, int rank);

}  // namespace quartet
