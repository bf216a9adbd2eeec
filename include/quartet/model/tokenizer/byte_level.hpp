#pragma once
// GPT-2's bytes_to_unicode, the byte-level alphabet of GPT-2, Llama-3 and Qwen tokenizers: every
// byte maps to a printable character so that BPE tokens are printable strings; printable
// Latin-1 bytes map to themselves, the rest to U+0100 onwards.
#include <string>
#include <string_view>

namespace quartet {

// Each byte of `s` as its byte-level character (UTF-8).
std::string byte_level_encode(std::string_view s);

// HF's ByteLevel decoder: a token made only of byte characters appends those bytes to `bytes`,
// any other token (an added token such as " <tool>") its own UTF-8 bytes.
void byte_level_decode_token(std::string_view token, std::string& bytes);

}  // namespace quartet
