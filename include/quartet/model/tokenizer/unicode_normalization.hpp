#pragma once
// Unicode normalization forms C and KC (UAX #15), for the NFC and NFKC normalizers of a
// tokenizer.json, from ICU.
#include <string>
#include <string_view>

namespace quartet {

enum class UnicodeForm { NFC, NFKC };

// `s` (valid UTF-8) in the form; text already in it is returned unchanged without a copy
// through UTF-16 (ASCII always is).
std::string unicode_normalize(std::string_view s, UnicodeForm form);

}  // namespace quartet
