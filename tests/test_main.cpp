// GoogleTest main for quartet, as LAMMPS does it: MPI is up before any test, rank 0 prints the
// usual report, the other ranks print only their failures (prefixed with their rank), and the
// process fails on every rank when a test failed on any rank.
//
// Every test source is linked into one binary (tests/CMakeLists.txt: one build and one link
// instead of one a file). `--tests-of=test_x.cpp[,test_y.cpp]` runs only the tests defined in
// those files (as GoogleTest records where each test is defined), and --gtest_filter further
// narrows them: ctest runs each file's tests as an entry of its own.
#include <gtest/gtest.h>

#include <fnmatch.h>
#include <ftw.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

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

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(by, begin)) != std::string::npos; begin = end + 1)
    parts.push_back(text.substr(begin, end - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns)
    if (!p.empty() && fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// --gtest_filter's own grammar: positive patterns, then after '-' negative ones, ':'-separated.
bool passes_filter(const std::string& name, const std::string& filter) {
  const size_t dash = filter.find('-');
  const std::string positive = filter.substr(0, dash);
  if (!positive.empty() && !matches_any(name, split(positive, ':'))) return false;
  return dash == std::string::npos || !matches_any(name, split(filter.substr(dash + 1), ':'));
}

bool defined_in(const char* file, const std::vector<std::string>& sources) {
  const std::string path = file ? file : "";
  const std::string base = path.substr(path.find_last_of('/') + 1);
  for (const std::string& s : sources)
    if (base == s) return true;
  return false;
}

// Narrows GoogleTest's filter to the tests defined in `sources`. A file may define none in this
// build: a parameterized suite instantiated only where a GPU is (the kernels' tests).
void select_tests_of(const std::vector<std::string>& sources) {
  const std::string filter = ::testing::GTEST_FLAG(filter);
  std::string names;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& test = *suite.GetTestInfo(j);
      const std::string name = std::string(suite.name()) + "." + test.name();
      if (defined_in(test.file(), sources) && passes_filter(name, filter)) names += (names.empty() ? "" : ":") + name;
    }
  }
  ::testing::GTEST_FLAG(filter) = names.empty() ? "-*" : names;
}

// The files named by --tests-of=..., removed from argv; empty when none is.
std::vector<std::string> take_tests_of(int* argc, char** argv) {
  const char* flag = "--tests-of=";
  std::vector<std::string> sources;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) {
      for (const std::string& s : split(argv[i] + std::strlen(flag), ','))
        if (!s.empty()) sources.push_back(s);
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return sources;
}
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
  const std::vector<std::string> sources = quartet::test::take_tests_of(&argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (!sources.empty()) quartet::test::select_tests_of(sources);
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
