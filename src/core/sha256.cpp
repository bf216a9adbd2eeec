#include "quartet/core/sha256.hpp"

#include <openssl/evp.h>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"

namespace quartet {

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  QUARTET_CHECK(EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1,
                "OpenSSL's EVP_Digest(SHA-256) failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_file_hex(const std::string& path) { return sha256_hex(read_file(path)); }

}  // namespace quartet
