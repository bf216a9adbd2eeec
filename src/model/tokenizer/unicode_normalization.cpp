#include "quartet/model/tokenizer/unicode_normalization.hpp"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <vector>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

void icu_check(UErrorCode err, const char* what) {
  if (U_FAILURE(err)) fail(__FILE__, __LINE__, std::string("ICU ") + what + " failed: " + u_errorName(err));
}

const UNormalizer2* normalizer(UnicodeForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = form == UnicodeForm::NFC ? unorm2_getNFCInstance(&err) : unorm2_getNFKCInstance(&err);
  icu_check(err, form == UnicodeForm::NFC ? "unorm2_getNFCInstance" : "unorm2_getNFKCInstance");
  return n;
}

std::vector<UChar> to_utf16(std::string_view s) {
  std::vector<UChar> out(s.size() + 1);
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(out.data(), static_cast<int32_t>(out.size()), &len, s.data(), static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strFromUTF8");
  out.resize(static_cast<size_t>(len));
  return out;
}

std::string to_utf8(const std::vector<UChar>& s) {
  std::string out(s.size() * 3 + 4, '\0');
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len, s.data(), static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strToUTF8");
  out.resize(static_cast<size_t>(len));
  return out;
}

}  // namespace

std::string unicode_normalize(std::string_view s, UnicodeForm form) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(s);
  QUARTET_CHECK(s.size() < (size_t{1} << 29), "Unicode normalization: a text of " + std::to_string(s.size()) +
                                                  " bytes is too long for ICU");
  const UNormalizer2* n = normalizer(form);
  const std::vector<UChar> src = to_utf16(s);
  const auto len = static_cast<int32_t>(src.size());
  UErrorCode err = U_ZERO_ERROR;
  if (unorm2_spanQuickCheckYes(n, src.data(), len, &err) == len && U_SUCCESS(err)) return std::string(s);
  icu_check(err, "unorm2_spanQuickCheckYes");
  // NFKC can grow a text (U+FDFA becomes 18 characters); one retry with the size ICU asks for.
  std::vector<UChar> dst(src.size() * 2 + 16);
  int32_t out = unorm2_normalize(n, src.data(), len, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(out));
    out = unorm2_normalize(n, src.data(), len, dst.data(), static_cast<int32_t>(dst.size()), &err);
  }
  icu_check(err, "unorm2_normalize");
  dst.resize(static_cast<size_t>(out));
  return to_utf8(dst);
}

}  // namespace quartet
