// The watchdog in one process: a watch that outlives the timeout is reported once, with the
// operation and what it waits for; finished work is never reported.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "quartet/dist/watchdog.hpp"

using namespace quartet;
using namespace std::chrono_literals;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_watchdog {

namespace {
struct Reports {
  std::mutex m;
  std::vector<std::string> seen;
  Watchdog::TimeoutHandler handler() {
    return [this](const std::string& r) {
      std::lock_guard<std::mutex> l(m);
      seen.push_back(r);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> l(m);
    return seen;
  }
};
}  // namespace

TEST(Watchdog, FiresOnAStalledScopedWatchWithItsStatus) {
  Reports reports;
  Watchdog dog(0.2, reports.handler());
  auto w = dog.watch("barrier #1 on group 'actor'");
  w.status("waiting for the header from world rank 5");
  std::this_thread::sleep_for(600ms);
  auto seen = reports.get();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("barrier #1 on group 'actor' has not finished after 0."), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("waiting for the header from world rank 5"), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("dist.watchdog_timeout = 0.2 s"), std::string::npos) << seen[0];
}

TEST(Watchdog, QuietWhenWorkFinishesInTime) {
  Reports reports;
  Watchdog dog(0.3, reports.handler());
  for (int i = 0; i < 20; ++i) {
    auto w = dog.watch("all_reduce #" + std::to_string(i));
    std::this_thread::sleep_for(5ms);
  }
  std::atomic<bool> finished{false};
  dog.watch_until("nccl all_gather", [&] { return finished.load(); });
  std::this_thread::sleep_for(100ms);
  finished = true;
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(reports.get().empty());
  EXPECT_EQ(dog.pending(), 0u);
}

TEST(Watchdog, FiresOnAsynchronousWorkThatNeverCompletes) {
  Reports reports;
  Watchdog dog(0.2, reports.handler());
  dog.watch_until("reduce_scatter #4 on group 'critic'", [] { return false; });
  std::this_thread::sleep_for(600ms);
  auto seen = reports.get();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("reduce_scatter #4 on group 'critic' has not finished"), std::string::npos);
  EXPECT_NE(seen[0].find("a rank of this group stalled or never joined"), std::string::npos);
}

}  // namespace test_watchdog
