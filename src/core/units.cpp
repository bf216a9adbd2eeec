#include "quartet/core/units.hpp"

#include <cstdio>
#include <stdexcept>

namespace quartet {

double leading_number(const std::string& text, std::size_t* used) {
  try {
    return std::stod(text, used);
  } catch (const std::exception&) {  // no number, or out of range
    *used = 0;
    return 0;
  }
}

long long leading_integer(const std::string& text, std::size_t* used) {
  try {
    return std::stoll(text, used);
  } catch (const std::exception&) {
    *used = 0;
    return 0;
  }
}

std::uint64_t parse_bytes(const std::string& text) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += ch;
  if (t == "auto") return 0;
  size_t used = 0;
  const double value = leading_number(t, &used);
  const std::string unit = t.substr(used);
  struct { const char* name; double factor; } units[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& u : units)
    if (used > 0 && unit == u.name && value > 0) return static_cast<std::uint64_t>(value * u.factor);
  throw std::invalid_argument("'" + text + "' is not a size: write auto, or a positive number with an "
                              "optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 80GiB");
}

double parse_duration(const std::string& text) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += ch;
  const std::invalid_argument bad("'" + text + "' is not a duration: write seconds (3600) or amounts with units d, h, m, s "
                                  "(90m, 23h30m, 1h5m30s)");
  if (t.empty()) throw bad;
  size_t used = 0;
  const double plain = leading_number(t, &used);
  if (used == t.size()) {
    if (!(plain >= 0)) throw bad;
    return plain;
  }
  double total = 0;
  size_t i = 0;
  std::string seen;
  while (i < t.size()) {
    size_t n = 0;
    const double v = leading_number(t.substr(i), &n);
    if (n == 0) throw bad;
    i += n;
    if (i >= t.size() || !(v >= 0)) throw bad;
    const char unit = t[i++];
    if (seen.find(unit) != std::string::npos) throw bad;
    seen += unit;
    switch (unit) {
      case 'd': total += v * 86400; break;
      case 'h': total += v * 3600; break;
      case 'm': total += v * 60; break;
      case 's': total += v; break;
      default: throw bad;
    }
  }
  return total;
}

std::string duration_text(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

std::string bytes_text(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) value /= 1024.0, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, "%.4g%s", value, kUnits[unit]);
  return text;
}

}  // namespace quartet
