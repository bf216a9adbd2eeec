#pragma once
// Tokenizers without Python: Hugging Face tokenizer.json with a BPE model, byte-level (GPT-2,
// Llama-3, Qwen) or SentencePiece-style (Llama-2, Mistral, Gemma: Metaspace, byte fallback),
// encoded and decoded as the `tokenizers` library does; and a small character vocabulary for the
// built-in demo tasks.
//
// Text is UTF-8. Invalid UTF-8 given to an HF tokenizer's encode is read as Python's
// bytes.decode(errors="replace") would: each maximal ill-formed subsequence becomes U+FFFD.
// decode likewise replaces byte sequences that do not form UTF-8 (a token cut inside a
// character) by U+FFFD, as HF does. Tokenizers are safe to use from several threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace quartet {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`; with add_special_tokens, what the tokenizer's post-processor adds
  // (a BOS token for Llama-3, nothing for GPT-2). Added/special tokens written out in the text
  // are recognised as such, as HF does.
  virtual std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const = 0;
  // An id outside the vocabulary is a quartet::Error (HF would skip it silently).
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  std::optional<int64_t> bos_id, eos_id, pad_id;
};

// Reads a Hugging Face tokenizer.json; anything it does not support is refused by name
// (quartet::Error naming the file and the JSON path). Supported (docs/tokenizers.md):
//   model           BPE (merges as "a b" or ["a", "b"]; ignore_merges, byte_fallback, unk_token,
//                   fuse_unk)
//   added_tokens    with special, lstrip, rstrip, single_word and normalized
//   normalizer      null, Prepend, Replace (String or Regex), NFC, NFKC, or a Sequence of them
//   pre_tokenizer   null, ByteLevel, Split (Regex or String, every behavior, invert), Metaspace
//                   (prepend_scheme always / first / never, split), or a Sequence of them
//   post_processor  null, ByteLevel, TemplateProcessing (its single template), or a Sequence
//   decoder         null, ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, or a Sequence
// bos_id is set when the template puts one special token before the text.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);
// The tokenizer of a model directory (its tokenizer.json; bos/eos/pad from
// tokenizer_config.json (a token string or {"content": ...}) or else config.json's
// *_token_id (the first, when it is a list)).
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir);

// One token per character of `alphabet` (UTF-8 characters), after the special tokens
// (e.g. {"<pad>", "<bos>", "<eos>"}), which take ids 0, 1, 2, ... in that order. Specials named
// <pad>, <bos>/<s>, <eos>/</s>/<|endoftext|> set pad_id, bos_id, eos_id; encode puts bos first
// with add_special_tokens, and a character outside the alphabet is a quartet::Error.
std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet,
                                               const std::vector<std::string>& specials);

}  // namespace quartet
