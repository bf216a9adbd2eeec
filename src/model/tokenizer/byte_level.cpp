#include "quartet/model/tokenizer/byte_level.hpp"

#include <array>
#include <cstdint>

#include "quartet/model/tokenizer/utf8.hpp"

namespace quartet {

namespace {

struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> char_to_byte;  // code point -> byte, -1 when not a byte character
  ByteLevelTable() {
    char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(byte_to_utf8[b], cp);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

}  // namespace

std::string byte_level_encode(std::string_view s) {
  const auto& t = byte_level();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}


void byte_level_decode_token(std::string_view token, std::string& bytes) {
  const auto& t = byte_level();
  const size_t mark = bytes.size();
  for (size_t i = 0; i < token.size();) {
    char32_t cp = next_code_point(token, i);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      bytes.resize(mark);
      bytes.append(token);
      return;
    }
    bytes += static_cast<char>(t.char_to_byte[cp]);
  }
}

}  // namespace quartet
