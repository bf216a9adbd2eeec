#pragma once
// The built-in character tokenizer (model_spec.hpp: make_builtin_tokenizer) as Hugging Face
// tokenizer files, so that a model trained with it exports to a directory that transformers'
// AutoTokenizer and quartet's own loader both read and that encodes and decodes exactly as the
// built-in one does:
//   tokenizer.json          a BPE model without merges whose vocabulary is the characters (one
//                           token each, under the built-in ids), <pad> <bos> <eos> as special
//                           added tokens, a template that puts <bos> first, and a ByteLevel
//                           decoder (it joins the tokens without spaces; every character of the
//                           alphabet is printable ASCII, which it passes through unchanged)
//   tokenizer_config.json   PreTrainedTokenizerFast with bos/eos/pad and no space clean-up
//   special_tokens_map.json
// One difference remains: a character outside the alphabet is an error for the built-in
// tokenizer and is dropped by a BPE without an unknown token (HF and quartet's loader alike).
#include <cstdint>
#include <string>

namespace quartet {

// The text of that tokenizer.json, byte for byte as written: its SHA-256 is the built-in
// tokenizer's identity, which a prompts file prepared for random:<family> actors records.
std::string builtin_tokenizer_json();

// Writes the three files into `dir` (which must exist), each atomically. Before returning,
// quartet's loader reads the written tokenizer.json back and must give the built-in ids for
// every token and for a text of the whole alphabet and the special tokens; otherwise
// quartet::Error (nothing a user can fix: a mismatch between this writer and the built-in).
void write_builtin_tokenizer_files(const std::string& dir, int64_t model_max_length);

}  // namespace quartet
