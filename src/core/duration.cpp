#include "quartet/core/duration.hpp"

#include <cstdio>
#include <stdexcept>

namespace quartet {

double parse_duration(const std::string& text) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += ch;
  const std::invalid_argument bad("'" + text + "' is not a duration: write seconds (3600) or amounts with units d, h, m, s "
                                  "(90m, 23h30m, 1h5m30s)");
  if (t.empty()) throw bad;
  size_t used = 0;
  double plain = 0;
  try {
    plain = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == t.size()) {
    if (!(plain >= 0)) throw bad;
    return plain;
  }
  double total = 0;
  size_t i = 0;
  std::string seen;
  while (i < t.size()) {
    size_t n = 0;
    double v = 0;
    try {
      v = std::stod(t.substr(i), &n);
    } catch (const std::exception&) {
      throw bad;
    }
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

}  // namespace quartet
