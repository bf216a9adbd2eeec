#pragma once
// SHA-256 (OpenSSL's libcrypto), as lowercase hex: the identity of a tokenizer.json or a chat
// template that a prepared prompts file records and `train` compares (io/prompt_identity.hpp).
// The same digest as Python's hashlib.sha256(data).hexdigest().
#include <string>

namespace quartet {

std::string sha256_hex(const std::string& bytes);
// The digest of a whole file's bytes; throws quartet::Error naming `path` when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace quartet
