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

// A fresh directory under $TMPDIR (else /tmp), named <prefix>_XXXXXX, removed with everything in
// it when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "quartet_test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  // Writes `text` to <dir>/<name>, returns the path (a missing parent directory: not written).
  std::string file(const std::string& name, const std::string& text) const;
  // The same, its parent directories made first.
  std::string file_in_subdirs(const std::string& name, const std::string& text) const;
  std::string path(const std::string& name) const { return path_ + "/" + name; }
  const std::string& directory() const { return path_; }

 private:
  std::string path_;
};
}  // namespace quartet::test
