#pragma once
// Argument checks shared by the RL math (advantages.cpp, losses.cpp): errors that name the
// function, the arguments and their shapes.
#include <torch/types.h>

#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

inline std::string shape_of(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

inline void check_same_shape(const char* fn, const char* a, const torch::Tensor& ta, const char* b,
                             const torch::Tensor& tb) {
  QUARTET_CHECK(ta.defined() && tb.defined() && ta.sizes() == tb.sizes(),
                std::string(fn) + ": " + a + " " + shape_of(ta) + " and " + b + " " + shape_of(tb) +
                    " must have the same shape");
}

}  // namespace quartet
