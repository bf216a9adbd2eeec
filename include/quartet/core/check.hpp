#pragma once
// Errors and check macros. Every failure says where it happened (rank, host, file:line) and what
// the library itself said, then throws quartet::Error; the command dispatcher turns an Error
// that escapes a collective phase into MPI_Abort so that no rank is left waiting.
#include <stdexcept>
#include <string>

namespace quartet {

// An error with its full context already formatted into what().
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "rank 3 (host node07)" once the world is up, "rank ? (host node07)" before.
std::string where_am_i();

[[noreturn]] void fail(const char* file, int line, const std::string& what);
[[noreturn]] void mpi_failed(int code, const char* call, const char* file, int line);
[[noreturn]] void cuda_failed(int code, const char* call, const char* file, int line);
[[noreturn]] void nccl_failed(int code, const char* call, const char* file, int line);
[[noreturn]] void hdf5_failed(long long code, const char* call, const char* file, int line);

}  // namespace quartet

// QUARTET_CHECK(cond, message): a broken precondition, with a message built from a std::string.
#define QUARTET_CHECK(cond, msg)                                             \
  do {                                                                       \
    if (!(cond)) ::quartet::fail(__FILE__, __LINE__, std::string(msg));      \
  } while (0)

// The library macros need that library's header at the call site (for MPI_SUCCESS etc.); this
// header itself includes none of them.
#define MPI_CHECK(call)                                                      \
  do {                                                                       \
    int quartet_rc_ = (call);                                                \
    if (quartet_rc_ != MPI_SUCCESS)                                          \
      ::quartet::mpi_failed(quartet_rc_, #call, __FILE__, __LINE__);         \
  } while (0)

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    cudaError_t quartet_rc_ = (call);                                        \
    if (quartet_rc_ != cudaSuccess)                                          \
      ::quartet::cuda_failed(static_cast<int>(quartet_rc_), #call, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                     \
  do {                                                                       \
    ncclResult_t quartet_rc_ = (call);                                       \
    if (quartet_rc_ != ncclSuccess)                                          \
      ::quartet::nccl_failed(static_cast<int>(quartet_rc_), #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative herr_t or hid_t on failure.
#define H5_CHECK(call)                                                       \
  ([&]() {                                                                   \
    auto quartet_rc_ = (call);                                               \
    if (quartet_rc_ < 0)                                                     \
      ::quartet::hdf5_failed(static_cast<long long>(quartet_rc_), #call, __FILE__, __LINE__); \
    return quartet_rc_;                                                      \
  }())
