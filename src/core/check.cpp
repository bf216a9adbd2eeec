#include "quartet/core/check.hpp"

#include <hdf5.h>
#include <mpi.h>
#ifdef QUARTET_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include <sstream>

#include "quartet/core/log.hpp"

namespace quartet {

std::string where_am_i() {
  std::ostringstream s;
  if (log_rank() >= 0)
    s << "rank " << log_rank() << " (host " << log_host() << ")";
  else
    s << "host " << log_host();
  return s.str();
}

void fail(const char* file, int line, const std::string& what) {
  std::ostringstream s;
  s << where_am_i() << ", " << file << ":" << line << ": " << what;
  throw Error(s.str());
}

void mpi_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "?");
  fail(file, line, std::string("MPI error ") + std::to_string(code) + " in " + call + ": " + text);
}

void cuda_failed(int code, const char* call, const char* file, int line) {
#ifdef QUARTET_WITH_CUDA
  const char* text = cudaGetErrorString(static_cast<cudaError_t>(code));
#else
  const char* text = "CUDA is not compiled in";
#endif
  fail(file, line, std::string("CUDA error ") + std::to_string(code) + " in " + call + ": " + text);
}

void nccl_failed(int code, const char* call, const char* file, int line) {
#ifdef QUARTET_WITH_CUDA
  std::string text = ncclGetErrorString(static_cast<ncclResult_t>(code));
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) text += std::string(" (") + last + ")";
#else
  std::string text = "NCCL is not compiled in";
#endif
  fail(file, line, std::string("NCCL error ") + std::to_string(code) + " in " + call + ": " + text);
}

namespace {
herr_t collect_hdf5_error(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (n > 0) *text += "; ";
  *text += std::string(err->func_name ? err->func_name : "?") + ": " + (err->desc ? err->desc : "?");
  return 0;
}
}  // namespace

void hdf5_failed(long long code, const char* call, const char* file, int line) {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_hdf5_error, &text);
  if (text.empty()) text = "no HDF5 error stack";
  fail(file, line, std::string("HDF5 error ") + std::to_string(code) + " in " + call + ": " + text);
}

}  // namespace quartet
