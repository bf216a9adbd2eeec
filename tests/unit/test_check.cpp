// The check macros: each failure names the rank, the host, file:line, the call and the
// library's own error text.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#ifdef QUARTET_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/core/log.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_check {

namespace {
using test::error_of;

std::string expected_prefix(int line) {
  return "rank " + std::to_string(test::world().rank()) + " (host " + log_host() + "), " +
         __FILE__ + ":" + std::to_string(line) + ": ";
}
}  // namespace

TEST(Check, ConditionWithMessage) {
  int line = __LINE__ + 1;
  std::string e = error_of([] { QUARTET_CHECK(1 + 1 == 3, "arithmetic is broken"); });
  EXPECT_EQ(e, expected_prefix(line) + "arithmetic is broken");
}

TEST(Check, MpiErrorWithMpisOwnText) {
  int buf = 0;
  int line = __LINE__ + 1;
  std::string e = error_of([&] { MPI_CHECK(MPI_Bcast(&buf, -1, MPI_INT, 0, MPI_COMM_WORLD)); });
  EXPECT_EQ(e.rfind(expected_prefix(line) + "MPI error ", 0), 0u) << e;
  EXPECT_NE(e.find("in MPI_Bcast(&buf, -1, MPI_INT, 0, MPI_COMM_WORLD): MPI_ERR_COUNT"), std::string::npos) << e;
}

TEST(Check, Hdf5ErrorWithItsErrorStack) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the stack goes into the message, not stderr
  int line = __LINE__ + 1;
  std::string e = error_of([] { H5_CHECK(H5Fopen("/nonexistent/run.h5", H5F_ACC_RDONLY, H5P_DEFAULT)); });
  EXPECT_EQ(e.rfind(expected_prefix(line) + "HDF5 error -1 in H5Fopen(", 0), 0u) << e;
  EXPECT_NE(e.find("unable to open file"), std::string::npos) << e;
  // A call that succeeds passes its value through.
  hid_t space = H5_CHECK(H5Screate(H5S_SCALAR));
  EXPECT_GE(space, 0);
  H5Sclose(space);
}

#ifdef QUARTET_WITH_CUDA
TEST(Check, CudaAndNcclErrorsWithTheirOwnText) {
  int line = __LINE__ + 1;
  std::string e = error_of([] { CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_EQ(e, expected_prefix(line) + "CUDA error 1 in cudaErrorInvalidValue: invalid argument");
  line = __LINE__ + 1;
  e = error_of([] { NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_EQ(e.rfind(expected_prefix(line) + "NCCL error 4 in ncclInvalidArgument: invalid argument", 0), 0u) << e;
}
#endif

}  // namespace test_check
