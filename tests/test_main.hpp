#pragma once
// Shared by every test binary: the MPI world that tests/test_main.cpp set up before the tests.
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/dist/world.hpp"

namespace quartet::test {
const World& world();

// The message of the quartet::Error that `f` throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace quartet::test
