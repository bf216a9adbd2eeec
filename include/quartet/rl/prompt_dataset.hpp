#pragma once
// The prompts of a run: a plain JSONL file (one object per line, the text in
// rollout.prompt_field, optional other fields kept as they are, e.g. "answer" for rule rewards),
// a prepared JSONL file (io/prompts.hpp, docs/data.md: a header, then rows with "prompt" and
// "prompt_ids"), or a pre-tokenised HDF5 file (dataset "input_ids", int64 [N, L], right-padded,
// with "lengths" int64 [N]). Every rank reads the whole (small) index; plain prompts are
// tokenised when drawn, prepared ones never. Which prompts a rank draws: engine/prompt_sampler.hpp.
//
// The file kind is told by its name (.h5, .hdf5) or the HDF5 signature; anything else is JSONL,
// prepared when it begins with a header. In JSONL, blank lines are skipped and "answer", when
// present, must be a string. A prepared file's rows are checked when it is read: ids inside the
// tokenizer's vocabulary, at most max_tokens of them (rollout.prompt_field does not apply: its
// rows are "prompt" and "prompt_ids"). Whether the file was made for the actor's tokenizer and
// chat template is io/prompt_identity.hpp's question, asked before any model is built. In HDF5,
// input_ids may be any integer type (read as int64); every length must lie in 1..L.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quartet/io/prompts.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

struct DatasetPrompt {
  int64_t index = -1;           // the dataset index (what get() took): the 0-based line among
                                // the JSONL file's non-blank lines, or the HDF5 row
  std::string text;             // "" for pre-tokenised prompts
  std::vector<int64_t> ids;     // token ids (the tokenizer's special tokens included)
  std::string answer;           // the "answer" field when present (rule rewards may use it)
  std::string record;           // JSONL: the whole row as JSON (a prepared row without its
                                // prompt_ids): messages, metadata, whatever else it holds
};

class PromptDataset {
 public:
  // Reads the file; errors name the file and line (a bad JSON line, a missing field, an empty
  // file, an HDF5 file without input_ids, a prepared row's id outside the vocabulary). Prompts
  // longer than max_tokens are refused (naming the line), never silently cut: plain and HDF5
  // prompts when drawn, prepared ones when read. The tokenizer must outlive
  // the dataset; it may be null for a pre-tokenised file (else ids are checked against its
  // vocabulary when drawn).
  PromptDataset(const std::string& path, const std::string& field, const Tokenizer* tokenizer,
                int64_t max_tokens);
  int64_t size() const;
  DatasetPrompt get(int64_t index) const;
  const std::string& path() const { return path_; }

 private:
  void read_prepared(const std::string& path);
  std::string path_;
  std::string field_;
  const Tokenizer* tokenizer_;
  int64_t max_tokens_;
  bool prepared_ = false;
  std::vector<std::string> texts_, answers_, records_;
  std::vector<std::vector<int64_t>> ids_;  // pre-tokenised (HDF5) or prepared
  std::vector<int64_t> lines_;  // 1-based file line of each JSONL prompt, for errors when drawn
};

// Whether `path` is a pre-tokenised HDF5 prompts file: by name (.h5, .hdf5) or by the format's
// signature at the start of the file.
bool looks_like_hdf5(const std::string& path);

// The header of `path` when it is a prepared JSONL prompts file; nullopt for a plain JSONL or an
// HDF5 file. A malformed header is a quartet::Error naming the file and line.
std::optional<PromptFileHeader> prepared_prompts_header(const std::string& path);

}  // namespace quartet
