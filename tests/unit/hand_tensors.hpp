#pragma once
// Small hand-made tensors for the arithmetic tests (test_rl_math.cpp, test_rl_recipes.cpp): rows
// of doubles in and out, compared element by element.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <limits>
#include <vector>

namespace quartet::test {

using Rows = std::vector<std::vector<double>>;
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

inline torch::Tensor t2(const Rows& rows, torch::Dtype dtype = torch::kFloat32) {
  const int64_t B = rows.size(), T = rows[0].size();
  auto out = torch::empty({B, T}, torch::kFloat64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) out[b][t] = rows[b][t];
  return out.to(dtype);
}

inline torch::Tensor t1(const std::vector<double>& v, torch::Dtype dtype = torch::kFloat32) {
  return t2({v}, dtype).squeeze(0);
}

inline void expect_rows(const torch::Tensor& got, const Rows& want, double tol = 1e-6) {
  ASSERT_EQ(got.dim(), 2);
  ASSERT_EQ(got.size(0), int64_t(want.size()));
  auto g = got.to(torch::kFloat64).cpu();
  for (size_t b = 0; b < want.size(); ++b) {
    ASSERT_EQ(got.size(1), int64_t(want[b].size()));
    for (size_t t = 0; t < want[b].size(); ++t)
      EXPECT_NEAR(g[b][t].item<double>(), want[b][t], tol) << "at [" << b << ", " << t << "]";
  }
}

inline double scalar(const torch::Tensor& t) { return t.item<double>(); }

}  // namespace quartet::test
