#include "quartet/dist/watchdog.hpp"

#include <mpi.h>

#include <cstdio>

#include "quartet/core/log.hpp"

namespace quartet {

struct Watchdog::Entry {
  std::string what;
  std::string status;  // what it waits for now; guarded by the watchdog's mutex
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::function<bool()> finished;  // polled, for asynchronous work
  std::atomic<bool> done{false};   // set by a scoped Watch
  Watchdog* owner = nullptr;
};

namespace {
void report_and_abort(const std::string& report) {
  eprintf_rank("%s\n", report.c_str());
  // MPI_Abort from this thread is allowed: the world asked for MPI_THREAD_MULTIPLE.
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}
}  // namespace

Watchdog::Watchdog(double timeout_seconds, TimeoutHandler on_timeout)
    : timeout_(timeout_seconds),
      on_timeout_(on_timeout ? std::move(on_timeout) : TimeoutHandler(report_and_abort)),
      thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Watchdog::Entry> Watchdog::add(const std::string& what,
                                               std::function<bool()> finished) {
  auto e = std::make_shared<Entry>();
  e->what = what;
  e->finished = std::move(finished);
  e->owner = this;
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(e);
  return e;
}

Watchdog::Watch Watchdog::watch(const std::string& what) { return Watch(add(what, nullptr)); }

void Watchdog::watch_until(const std::string& what, std::function<bool()> finished) {
  add(what, std::move(finished));
}

std::size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& e : entries_) n += !e->done;
  return n;
}

void Watchdog::loop() {
  using namespace std::chrono;
  // Poll often enough to fire within ~10% of the timeout, never busier than every 10 ms.
  auto period = duration<double>(std::min(1.0, std::max(0.01, timeout_ / 10)));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period);
    auto now = steady_clock::now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto& e = **it;
      // A completion query (cudaEventQuery) takes microseconds: polling under the lock is fine.
      if (!e.done && e.finished && e.finished()) e.done = true;
      if (e.done) {
        it = entries_.erase(it);
        continue;
      }
      double waited = duration<double>(now - e.start).count();
      if (waited > timeout_ && !fired_) {
        fired_ = true;
        char numbers[128];
        std::snprintf(numbers, sizeof(numbers),
                      " has not finished after %.1f s (dist.watchdog_timeout = %g s)", waited,
                      timeout_);
        std::string report = "watchdog: rank " + std::to_string(log_rank()) + ": " + e.what + numbers;
        report += e.status.empty() ? "; a rank of this group stalled or never joined"
                                   : "; " + e.status;
        report += ". Aborting the job.";
        auto handler = on_timeout_;
        lock.unlock();
        handler(report);
        lock.lock();
        break;  // the list may have changed while unlocked
      }
      ++it;
    }
  }
}

Watchdog::Watch& Watchdog::Watch::operator=(Watch&& other) noexcept {
  if (this != &other) {
    done();
    entry_ = std::move(other.entry_);
  }
  return *this;
}

Watchdog::Watch::~Watch() { done(); }

void Watchdog::Watch::done() {
  if (entry_) entry_->done = true;
  entry_.reset();
}

void Watchdog::Watch::status(const std::string& now) {
  if (!entry_) return;
  std::lock_guard<std::mutex> lock(entry_->owner->mutex_);
  entry_->status = now;
}

}  // namespace quartet
