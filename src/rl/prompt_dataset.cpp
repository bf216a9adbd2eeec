#include "quartet/rl/prompt_dataset.hpp"

#include <hdf5.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"
#include "quartet/io/prompts.hpp"

namespace quartet {
namespace {

// ---- reading ----------------------------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string json_type(const nlohmann::json& j) { return j.type_name(); }

// Closes an HDF5 handle when it goes out of scope, so an error midway leaks nothing.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() { if (id >= 0) close(id); }
};

// An integer dataset of the given rank, read as int64 (HDF5 converts narrower integers).
std::vector<int64_t> read_int64(hid_t file, const std::string& path, const char* name, int rank,
                                std::vector<hsize_t>& dims) {
  const std::string what = path + ": dataset " + name;
  QUARTET_CHECK(H5Lexists(file, name, H5P_DEFAULT) > 0,
                path + ": no dataset \"" + name + "\" (a pre-tokenised prompts file holds "
                "input_ids int64 [N, L], right-padded, and lengths int64 [N])");
  Handle set{H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)), H5Dclose};
  Handle type{H5_CHECK(H5Dget_type(set.id)), H5Tclose};
  QUARTET_CHECK(H5Tget_class(type.id) == H5T_INTEGER, what + " does not hold integers");
  Handle space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
  const int found = H5_CHECK(H5Sget_simple_extent_ndims(space.id));
  QUARTET_CHECK(found == rank, what + " has " + std::to_string(found) + " dimensions, not " +
                                   std::to_string(rank));
  dims.assign(static_cast<size_t>(rank), 0);
  H5_CHECK(H5Sget_simple_extent_dims(space.id, dims.data(), nullptr));
  size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<size_t>(d);
  std::vector<int64_t> out(n);
  if (n > 0) H5_CHECK(H5Dread(set.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
  return out;
}

}  // namespace

// A .h5 file that is damaged fails as HDF5 (which is what it was meant to be), not as a JSON line.
bool looks_like_hdf5(const std::string& path) {
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return true;
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  std::ifstream in(path, std::ios::binary);
  char head[8] = {0};
  return in.read(head, 8) && std::memcmp(head, kSignature, 8) == 0;
}

std::optional<PromptFileHeader> prepared_prompts_header(const std::string& path) {
  std::ifstream probe(path);
  QUARTET_CHECK(probe.good(), "cannot read prompts file '" + path + "'");
  if (looks_like_hdf5(path)) return std::nullopt;
  return read_prompt_header(path);
}

PromptDataset::PromptDataset(const std::string& path, const std::string& field,
                             const Tokenizer* tokenizer, int64_t max_tokens)
    : path_(path), field_(field), tokenizer_(tokenizer), max_tokens_(max_tokens) {
  QUARTET_CHECK(max_tokens > 0, path + ": the prompt token limit must be positive, not " +
                                    std::to_string(max_tokens));
  std::ifstream probe(path);
  QUARTET_CHECK(probe.good(), "cannot read prompts file '" + path + "'");
  probe.close();

  if (looks_like_hdf5(path)) {
    // HDF5's own message says what is wrong (a truncated file, another format); the prefix says
    // which file the run was reading.
    hid_t fid = -1;
    try {
      fid = H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    } catch (const Error& e) {
      fail(__FILE__, __LINE__, path + ": not a readable HDF5 file (" + e.what() + ")");
    }
    Handle file{fid, H5Fclose};
    std::vector<hsize_t> ids_dims, len_dims;
    const std::vector<int64_t> flat = read_int64(file.id, path, "input_ids", 2, ids_dims);
    const std::vector<int64_t> lengths = read_int64(file.id, path, "lengths", 1, len_dims);
    const int64_t n = static_cast<int64_t>(ids_dims[0]), width = static_cast<int64_t>(ids_dims[1]);
    QUARTET_CHECK(static_cast<int64_t>(len_dims[0]) == n,
                  path + ": lengths has " + std::to_string(len_dims[0]) + " entries but input_ids " +
                      std::to_string(n) + " rows");
    ids_.reserve(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t len = lengths[static_cast<size_t>(r)];
      QUARTET_CHECK(len > 0 && len <= width,
                    path + ": row " + std::to_string(r) + ": length " + std::to_string(len) +
                        " is outside 1.." + std::to_string(width) + " (the width of input_ids)");
      const auto begin = flat.begin() + r * width;
      ids_.emplace_back(begin, begin + len);
    }
    QUARTET_CHECK(!ids_.empty(), path + ": input_ids has no rows (the file holds no prompts)");
    return;
  }

  QUARTET_CHECK(tokenizer != nullptr, path + ": a JSONL prompts file needs a tokenizer");
  if (read_prompt_header(path)) {
    read_prepared(path);
    return;
  }
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, int64_t n) {
    QUARTET_CHECK(j.is_object(), where + ": expected a JSON object, found " + json_type(j));
    QUARTET_CHECK(j.contains(field), where + ": no \"" + field + "\" field");
    QUARTET_CHECK(j[field].is_string(), where + ": \"" + field + "\" is " + json_type(j[field]) +
                                            ", not a string");
    std::string answer;
    if (j.contains("answer")) {
      QUARTET_CHECK(j["answer"].is_string(),
                    where + ": \"answer\" is " + json_type(j["answer"]) + ", not a string");
      answer = j["answer"].get<std::string>();
    }
    texts_.push_back(j[field].get<std::string>());
    answers_.push_back(std::move(answer));
    records_.push_back(j.dump());
    lines_.push_back(n);
  });
  QUARTET_CHECK(!texts_.empty(), path + ": holds no prompts (the file is empty or blank)");
}

// The rows after the header, their ids checked against the actor's vocabulary and the prompt
// limit now, naming the line: they were made elsewhere, and nothing tokenizes them again.
void PromptDataset::read_prepared(const std::string& path) {
  prepared_ = true;
  bool header = true;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, int64_t n) {
    if (header) {
      header = false;
      return;
    }
    std::vector<int64_t> ids = prepared_row_ids(j, where);
    for (size_t k = 0; k < ids.size(); ++k)
      QUARTET_CHECK(ids[k] < tokenizer_->vocab_size(),
                    where + ": prompt_ids[" + std::to_string(k) + "] = " + std::to_string(ids[k]) +
                        " is outside the actor tokenizer's vocabulary of " + std::to_string(tokenizer_->vocab_size()));
    QUARTET_CHECK(static_cast<int64_t>(ids.size()) <= max_tokens_,
                  where + ": the prompt has " + std::to_string(ids.size()) + " tokens, more than the " +
                      std::to_string(max_tokens_) + " allowed (rollout.max_prompt_tokens)");
    nlohmann::json record = j;
    record.erase("prompt_ids");  // held once, in ids_
    texts_.push_back(j["prompt"].get<std::string>());
    answers_.push_back(j.contains("answer") && j["answer"].is_string() ? j["answer"].get<std::string>() : "");
    records_.push_back(record.dump());
    ids_.push_back(std::move(ids));
    lines_.push_back(n);
  });
  QUARTET_CHECK(!ids_.empty(), path + ": a prepared prompts file with a header and no rows");
}

int64_t PromptDataset::size() const {
  return static_cast<int64_t>(ids_.empty() ? texts_.size() : ids_.size());
}

DatasetPrompt PromptDataset::get(int64_t index) const {
  QUARTET_CHECK(index >= 0 && index < size(), path_ + ": prompt " + std::to_string(index) +
                                                  " is outside 0.." + std::to_string(size() - 1));
  const size_t i = static_cast<size_t>(index);
  DatasetPrompt p;
  p.index = index;
  std::string where;
  if (prepared_) {
    where = path_ + ":" + std::to_string(lines_[i]);
    p.ids = ids_[i];
    p.text = texts_[i];
    p.answer = answers_[i];
    p.record = records_[i];
  } else if (!ids_.empty()) {
    where = path_ + ": row " + std::to_string(index);
    p.ids = ids_[i];
    if (tokenizer_) {
      // Ids made with another tokenizer would index past the embedding table much later.
      for (int64_t id : p.ids)
        QUARTET_CHECK(id >= 0 && id < tokenizer_->vocab_size(),
                      where + ": token id " + std::to_string(id) + " is outside the tokenizer's "
                      "vocabulary of " + std::to_string(tokenizer_->vocab_size()));
    }
  } else {
    where = path_ + ":" + std::to_string(lines_[i]);
    p.text = texts_[i];
    p.answer = answers_[i];
    p.record = records_[i];
    try {
      p.ids = tokenizer_->encode(p.text, /*add_special_tokens=*/true);
    } catch (const Error& e) {
      fail(__FILE__, __LINE__, where + ": cannot tokenise the prompt: " + e.what());
    }
    QUARTET_CHECK(!p.ids.empty(), where + ": the prompt tokenises to no tokens");
  }
  // Refused, never cut: a cut prompt would be scored against an answer to a different question.
  QUARTET_CHECK(static_cast<int64_t>(p.ids.size()) <= max_tokens_,
                where + ": the prompt has " + std::to_string(p.ids.size()) +
                    " tokens, more than the " + std::to_string(max_tokens_) +
                    " allowed (rollout.max_prompt_tokens)");
  return p;
}

}  // namespace quartet
