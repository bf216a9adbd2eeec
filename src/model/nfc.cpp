#include "quartet/model/nfc.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <vector>

#ifdef QUARTET_WITH_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/model/tokenizer.hpp"
#include "quartet/model/utf8.hpp"

namespace quartet {

namespace {

enum NfcQc : uint8_t { NFC_YES, NFC_MAYBE, NFC_NO };
struct NfcRange {
  char32_t first, last;
  uint8_t ccc;
  NfcQc qc;
};
constexpr NfcRange kNfcRanges[] = {
#include "nfc_quick_check.inc"
};

NfcQc nfc_quick_check(std::string_view s) {
  NfcQc result = NFC_YES;
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {  // below U+0300: ccc 0, NFC_QC Yes
      i += utf8_length(static_cast<unsigned char>(s[i]));
      last_ccc = 0;
      continue;
    }
    char32_t cp = next_code_point(s, i);
    auto it = std::upper_bound(std::begin(kNfcRanges), std::end(kNfcRanges), cp,
                               [](char32_t c, const NfcRange& r) { return c < r.first; });
    uint8_t ccc = 0;
    NfcQc qc = NFC_YES;
    if (it != std::begin(kNfcRanges) && cp <= (it - 1)->last) {
      ccc = (it - 1)->ccc;
      qc = (it - 1)->qc;
    }
    if (ccc != 0 && last_ccc > ccc) return NFC_NO;
    if (qc == NFC_NO) return NFC_NO;
    if (qc == NFC_MAYBE) result = NFC_MAYBE;
    last_ccc = ccc;
  }
  return result;
}

#ifdef QUARTET_WITH_ICU
void icu_check(UErrorCode err, const char* what) {
  if (U_FAILURE(err)) fail(__FILE__, __LINE__, std::string("ICU ") + what + " failed: " + u_errorName(err));
}

std::string icu_nfc(const std::string& s) {
  QUARTET_CHECK(s.size() < (size_t{1} << 30), "NFC: text of " + std::to_string(s.size()) +
                                                  " bytes is too long for ICU");
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  icu_check(err, "unorm2_getNFCInstance");
  std::vector<UChar> src(s.size() + 1), dst;
  int32_t len16 = 0;
  u_strFromUTF8(src.data(), static_cast<int32_t>(src.size()), &len16, s.data(),
                static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strFromUTF8");
  // Composition never lengthens UTF-16 by more than a small factor; retry once if it does.
  dst.resize(static_cast<size_t>(len16) * 3 + 16);
  int32_t n = unorm2_normalize(nfc, src.data(), len16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(n) + 1);
    n = unorm2_normalize(nfc, src.data(), len16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  }
  icu_check(err, "unorm2_normalize");
  std::string out(static_cast<size_t>(n) * 3 + 4, '\0');
  int32_t len8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len8, dst.data(), n, &err);
  icu_check(err, "u_strToUTF8");
  out.resize(static_cast<size_t>(len8));
  return out;
}
#endif

}  // namespace

std::string nfc(const std::string& s, const std::string& where) {
  if (nfc_quick_check(s) == NFC_YES) return s;
#ifdef QUARTET_WITH_ICU
  (void)where;
  return icu_nfc(s);
#else
  fail(__FILE__, __LINE__,
       where + ": normalizer NFC: this text is not (provably) in NFC already, and quartet was "
               "built without ICU, which it needs to normalize it (build with QUARTET_WITH_ICU, "
               "or NFC-normalize the text beforehand)");
#endif
}

bool full_nfc_available() {
#ifdef QUARTET_WITH_ICU
  return true;
#else
  return false;
#endif
}

}  // namespace quartet
