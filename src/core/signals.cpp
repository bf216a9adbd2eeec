#include "quartet/core/signals.hpp"

#include <time.h>

#include <atomic>
#include <csignal>
#include <cstdint>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {
// Written only by the handler; lock-free and async-signal-safe as sig_atomic_t.
volatile std::sig_atomic_t g_requests = 0;
volatile std::sig_atomic_t g_first = 0;
// When the last counted request came (ms, monotonic clock). Lock-free, so safe in a handler.
std::atomic<int64_t> g_last_ms{-1};
static_assert(std::atomic<int64_t>::is_always_lock_free, "the signal handler needs a lock-free clock stamp");

// One request often arrives several times within a moment: `scancel --full` signals the batch
// shell, which forwards it, and the job step too; mpirun forwards what it gets besides. Copies
// within this window count once, so that one request is never taken for two.
constexpr int64_t kSameRequestMs = 1000;

extern "C" void on_stop_signal(int signo) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  const int64_t last = g_last_ms.load();
  if (last >= 0 && now - last < kSameRequestMs) return;
  g_last_ms.store(now);
  if (g_first == 0) g_first = signo;
  g_requests = g_requests + 1;
}
}  // namespace

bool install_stop_handlers() {
  bool replaced = false;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write the signal interrupts carries on (HDF5 and MPI do not all
  // retry on EINTR); the flag is looked at later, at a safe point.
  action.sa_flags = SA_RESTART;
  for (int signo : {SIGUSR1, SIGTERM}) {
    struct sigaction old {};
    QUARTET_CHECK(sigaction(signo, &action, &old) == 0, "cannot install the handler of signal " + std::to_string(signo));
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN && old.sa_handler != on_stop_signal) replaced = true;
  }
  return replaced;
}

int stop_requests() { return g_requests; }

const char* first_stop_signal() {
  switch (g_first) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "";
  }
}

}  // namespace quartet
