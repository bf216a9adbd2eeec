#pragma once
// Durations as the deck writes them and as the log prints them.
#include <string>

namespace quartet {

// "3600", "90m", "23h30m", "1h5m30s", "45s", "2d" as seconds; throws std::invalid_argument.
double parse_duration(const std::string& text);

// Seconds as the log shows an elapsed time or an ETA: "12.3s", "4m05s", "2h17m".
std::string duration_text(double seconds);

}  // namespace quartet
