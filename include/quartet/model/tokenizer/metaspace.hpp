#pragma once
// Metaspace, SentencePiece's way with spaces (Llama-2, Mistral): as a pre-tokenizer it turns
// every space into the replacement character (U+2581 "▁"), puts one before the text (always,
// only before the first piece of the input, or never) and optionally splits before each
// replacement; as a decoder it turns replacements back into spaces.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/text_origin.hpp"

namespace quartet {

struct Metaspace {
  enum class Prepend { Always, First, Never };
  std::string replacement = "\xE2\x96\x81";  // one character
  Prepend prepend = Prepend::Always;
  bool split = true;
};

// The Metaspace object at `json_path` (pre-tokenizer or decoder: the same fields). Files from
// before prepend_scheme have add_prefix_space; false with a prepend_scheme other than "never"
// is refused, as tokenizers refuses it.
Metaspace read_metaspace(const JsonFile& f, const nlohmann::json& m, const std::string& json_path);

// The pre-tokenizer on one piece (text_origin.hpp says what its origin is for).
void metaspace_pre_tokenize(const Metaspace& m, const TextPiece& piece, std::vector<TextPiece>& out);

// The decoder on the tokens so far: every replacement becomes a space, except in the first
// token, where it is dropped unless the prepend scheme is never.
void metaspace_decode(const Metaspace& m, std::vector<std::string>& tokens);

}  // namespace quartet
