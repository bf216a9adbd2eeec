#include "quartet/core/log.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace quartet {
namespace {
int g_rank = -1;
int g_size = 0;
std::string& host_storage() {
  static std::string host = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return host;
}
}  // namespace

void set_log_identity(int rank, int world_size, const std::string& host) {
  g_rank = rank;
  g_size = world_size;
  host_storage() = host;
}
int log_rank() { return g_rank; }
const std::string& log_host() { return host_storage(); }

void printf0(const char* fmt, ...) {
  if (g_rank > 0) return;
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stdout, fmt, args);
  va_end(args);
  std::fflush(stdout);
}

void eprintf_rank(const char* fmt, ...) {
  // One buffer, one write: lines from different ranks do not interleave mid-line.
  char buf[4096];
  int n = g_rank >= 0 ? std::snprintf(buf, sizeof(buf), "[rank %d/%d %s] ", g_rank, g_size,
                                      host_storage().c_str())
                      : std::snprintf(buf, sizeof(buf), "[%s] ", host_storage().c_str());
  va_list args;
  va_start(args, fmt);
  if (n >= 0 && n < static_cast<int>(sizeof(buf)))
    std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), fmt, args);
  va_end(args);
  std::fputs(buf, stderr);
  std::fflush(stderr);
}

}  // namespace quartet
