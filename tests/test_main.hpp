#pragma once
// Shared by every test binary: the MPI world that tests/test_main.cpp set up before the tests.
#include "quartet/dist/world.hpp"

namespace quartet::test {
const World& world();
}  // namespace quartet::test
