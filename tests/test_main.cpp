// GoogleTest main for quartet, as LAMMPS does it: MPI is up before any test, rank 0 prints the
// usual report, the other ranks print only their failures (prefixed with their rank), and the
// process fails on every rank when a test failed on any rank.
#include <gtest/gtest.h>

#include <ftw.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "quartet/core/files.hpp"

#include "test_main.hpp"

namespace quartet::test {
namespace {
World* g_world = nullptr;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    std::fflush(stderr);
  }

 private:
  int rank_;
};
}  // namespace

const World& world() { return *g_world; }

ScratchDir::ScratchDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "_XXXXXX";
  path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  nftw(path_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
       FTW_DEPTH | FTW_PHYS);
}

std::string ScratchDir::file(const std::string& name, const std::string& text) const {
  const std::string p = path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string ScratchDir::file_in_subdirs(const std::string& name, const std::string& text) const {
  make_directories(parent_directory(path(name)));
  return file(name, text);
}
}  // namespace quartet::test

int main(int argc, char** argv) {
  quartet::World world(&argc, &argv);
  quartet::test::g_world = &world;
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new quartet::test::RankFailurePrinter(world.rank()));
  }
  int rc = RUN_ALL_TESTS();
  bool all_passed = world.all_ok(rc == 0);
  if (!all_passed && rc == 0 && world.rank() == 0)
    std::printf("[  FAILED  ] a test failed on another rank (see its output above)\n");
  return all_passed ? 0 : 1;
}
