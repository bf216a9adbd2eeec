#pragma once
// `quartet tokenize MODEL_DIR [--decode] [--no-special]`: a hand check of a model's tokenizer.
// Reads standard input line by line: text -> token ids (space-separated), or with --decode
// token ids -> text. No MPI, no GPU. MODEL_DIR random: (or random:<family>) is the built-in
// character tokenizer of random models; `quartet tokenize random: --write-files DIR` writes it
// as Hugging Face files into DIR, for the data preparation (docs/data.md).
#include <iosfwd>

#include "quartet/core/cli.hpp"

namespace quartet {

int run_tokenize(const CommandLine& cl);
// The same, on explicit streams (for tests).
int tokenize_stream(const CommandLine& cl, std::istream& in, std::ostream& out);

}  // namespace quartet
