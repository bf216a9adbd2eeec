#pragma once
// Numbers, durations and sizes as the deck writes them, and durations as the log prints them.
#include <cstddef>
#include <cstdint>
#include <string>

namespace quartet {

// The number that starts `text`, read as std::stod (std::stoll) reads it, and through `used` how
// many characters it took: 0 where none starts it or it is out of range. `text` is that number
// and nothing else where *used == text.size().
double leading_number(const std::string& text, std::size_t* used);
long long leading_integer(const std::string& text, std::size_t* used);

// "80GiB", "40 GB", "512MiB", "1e9", "auto" (= 0) as bytes; throws std::invalid_argument on anything else.
std::uint64_t parse_bytes(const std::string& text);

// Bytes as the deck would write them, in the largest binary unit that keeps a number of at least
// 1: "64MiB", "1.5GiB", "512B".
std::string bytes_text(std::uint64_t bytes);

// "3600", "90m", "23h30m", "1h5m30s", "45s", "2d" as seconds; throws std::invalid_argument.
double parse_duration(const std::string& text);

// Seconds as the log shows an elapsed time or an ETA: "12.3s", "4m05s", "2h17m".
std::string duration_text(double seconds);

}  // namespace quartet
