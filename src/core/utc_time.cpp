#include "quartet/core/utc_time.hpp"

#include <ctime>

namespace quartet {

namespace {
std::string now_as(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}
}  // namespace

std::string utc_iso() { return now_as("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_stamp() { return now_as("%Y%m%dT%H%M%SZ"); }

}  // namespace quartet
