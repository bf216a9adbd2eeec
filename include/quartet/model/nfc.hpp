#pragma once
// Unicode normalization form C, for tokenizers whose normalizer is NFC (Qwen2). The quick check
// of UAX #15 proves most text already normalized without any tables beyond
// src/model/nfc_quick_check.inc; only text it cannot clear needs the real algorithm, which
// comes from ICU when quartet is built with it (QUARTET_WITH_ICU) and is refused otherwise
// (full_nfc_available() in tokenizer.hpp says which).
#include <string>

namespace quartet {

// `s` (valid UTF-8) in NFC. Without ICU, text not provably in NFC already is a quartet::Error
// naming `where` (the tokenizer file).
std::string nfc(const std::string& s, const std::string& where);

}  // namespace quartet
