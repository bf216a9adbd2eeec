#include "quartet/tune/pair_dataset.hpp"

#include <torch/types.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"

namespace quartet {

std::string pair_file_misfit(const std::string& path, const TokenizerIdentity& model, const PreparedFileKind& kind) {
  const std::optional<PromptFileHeader> header = read_pair_header(path);
  return header ? prepared_file_misfit(*header, model, kind) : "";
}

PairDataset::PairDataset(const std::string& path, const Tokenizer& tokenizer, int64_t max_tokens,
                         const TokenizerIdentity* identity, const PreparedFileKind& kind)
    : path_(path), max_tokens_(max_tokens) {
  QUARTET_CHECK(max_tokens > 1, path + ": the token limit of a pair's side must be at least 2, not " +
                                    std::to_string(max_tokens));
  const std::optional<PromptFileHeader> header = read_pair_header(path);
  prepared_ = header.has_value();
  if (header && identity) {
    const std::string misfit = prepared_file_misfit(*header, *identity, kind);
    QUARTET_CHECK(misfit.empty(), misfit);
  }
  const int64_t vocab = tokenizer.vocab_size();
  bool header_line = prepared_;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where, int64_t line) {
    if (header_line) {
      header_line = false;
      return;
    }
    if (prepared_) {
      PairRecord r = prepared_pair_row(j, where);
      add(std::move(r.prompt_ids), std::move(r.chosen_ids), std::move(r.rejected_ids), r.margin, line, vocab);
      return;
    }
    const PairRecord r = plain_pair_row(j, where);
    std::vector<int64_t> prompt, chosen, rejected;
    try {
      prompt = tokenizer.encode(r.prompt, /*add_special_tokens=*/true);
      chosen = tokenizer.encode(r.chosen, false);
      rejected = tokenizer.encode(r.rejected, false);
    } catch (const Error& e) {
      fail(__FILE__, __LINE__, where + ": cannot tokenize the pair: " + e.what());
    }
    QUARTET_CHECK(!prompt.empty(), where + ": the prompt tokenizes to no tokens");
    if (tokenizer.eos_id) {
      chosen.push_back(*tokenizer.eos_id);
      rejected.push_back(*tokenizer.eos_id);
    }
    add(std::move(prompt), std::move(chosen), std::move(rejected), r.margin, line, vocab);
  });
  QUARTET_CHECK(!lines_.empty(), path + ": holds no pairs" + std::string(prepared_ ? " (a header and no rows)" : ""));
}

void PairDataset::add(std::vector<int64_t> prompt, std::vector<int64_t> chosen, std::vector<int64_t> rejected,
                      std::optional<double> margin, int64_t line, int64_t vocab) {
  const std::string where = path_ + ":" + std::to_string(line);
  const std::pair<const char*, const std::vector<int64_t>*> sides[] = {
      {"prompt", &prompt}, {"chosen", &chosen}, {"rejected", &rejected}};
  for (const auto& [name, ids] : sides) {
    QUARTET_CHECK(!ids->empty(), where + ": the " + name + (ids == &prompt ? "" : " response") + " has no tokens");
    for (size_t k = 0; k < ids->size(); ++k)
      QUARTET_CHECK((*ids)[k] >= 0 && (*ids)[k] < vocab,
                    where + ": " + name + "_ids[" + std::to_string(k) + "] = " + std::to_string((*ids)[k]) +
                        " is outside the tokenizer's vocabulary of " + std::to_string(vocab));
  }
  for (const auto& [name, ids] : {sides[1], sides[2]}) {
    const int64_t n = static_cast<int64_t>(prompt.size() + ids->size());
    QUARTET_CHECK(n <= max_tokens_, where + ": the prompt and the " + name + " response have " + std::to_string(n) +
                                        " tokens, more than the " + std::to_string(max_tokens_) + " allowed");
  }
  QUARTET_CHECK(chosen != rejected, where + ": chosen and rejected are the same response (the same token ids): "
                                            "the pair states no preference");
  for (const auto* ids : {&prompt, &chosen, &rejected}) {
    for (int64_t id : *ids) tokens_.push_back(static_cast<int32_t>(id));  // < vocab, checked above
    offsets_.push_back(static_cast<int64_t>(tokens_.size()));
  }
  margins_given_ += margin.has_value();
  margins_.push_back(margin.value_or(0.0));
  lines_.push_back(line);
}

PreferencePair PairDataset::get(int64_t index) const {
  QUARTET_CHECK(index >= 0 && index < size(), path_ + ": pair " + std::to_string(index) + " is outside 0.." +
                                                  std::to_string(size() - 1));
  const size_t i = static_cast<size_t>(index);
  auto span = [&](size_t k) {
    return std::vector<int64_t>(tokens_.begin() + offsets_[3 * i + k], tokens_.begin() + offsets_[3 * i + k + 1]);
  };
  PreferencePair p;
  p.index = index;
  p.prompt = span(0);
  p.chosen = span(1);
  p.rejected = span(2);
  p.margin = margins_[i];
  return p;
}

std::vector<PreferencePair> PairDataset::get(const std::vector<int64_t>& indices) const {
  std::vector<PreferencePair> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(get(i));
  return out;
}

std::string PairDataset::where(int64_t index) const {
  QUARTET_CHECK(index >= 0 && index < size(), path_ + ": pair " + std::to_string(index) + " is outside 0.." +
                                                  std::to_string(size() - 1));
  return path_ + ":" + std::to_string(lines_[static_cast<size_t>(index)]);
}

namespace {

// One side of the batch: row i is pads, prompt i, response i, pads.
RolloutBatch side_batch(const std::vector<PreferencePair>& pairs, bool chosen, int64_t P, int64_t A, int64_t pad_id) {
  const int64_t N = static_cast<int64_t>(pairs.size());
  auto seq = torch::full({N, P + A}, pad_id, torch::kLong);
  auto attn = torch::zeros({N, P + A}, torch::kLong);
  auto act = torch::zeros({N, A}, torch::kLong);
  auto s = seq.accessor<int64_t, 2>();
  auto m = attn.accessor<int64_t, 2>();
  auto a = act.accessor<int64_t, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const PreferencePair& p = pairs[static_cast<size_t>(i)];
    const std::vector<int64_t>& response = chosen ? p.chosen : p.rejected;
    const int64_t left = P - static_cast<int64_t>(p.prompt.size());
    for (size_t k = 0; k < p.prompt.size(); ++k) {
      s[i][left + static_cast<int64_t>(k)] = p.prompt[k];
      m[i][left + static_cast<int64_t>(k)] = 1;
    }
    for (size_t k = 0; k < response.size(); ++k) {
      s[i][P + static_cast<int64_t>(k)] = response[k];
      m[i][P + static_cast<int64_t>(k)] = 1;
      a[i][static_cast<int64_t>(k)] = 1;
    }
  }
  return {seq, attn, act};
}

}  // namespace

PairBatch make_pair_batch(const std::vector<PreferencePair>& pairs, int64_t pad_id, int64_t max_width) {
  QUARTET_CHECK(!pairs.empty(), "make_pair_batch: no pairs");
  int64_t P = 0, A = 0;
  for (const PreferencePair& p : pairs) {
    QUARTET_CHECK(!p.prompt.empty() && !p.chosen.empty() && !p.rejected.empty(),
                  "make_pair_batch: pair " + std::to_string(p.index) + " has an empty prompt or response");
    P = std::max<int64_t>(P, static_cast<int64_t>(p.prompt.size()));
    A = std::max<int64_t>(A, static_cast<int64_t>(std::max(p.chosen.size(), p.rejected.size())));
  }
  A = bucketed_actions(P, A, max_width);
  PairBatch b;
  b.chosen = side_batch(pairs, true, P, A, pad_id);
  b.rejected = side_batch(pairs, false, P, A, pad_id);
  std::vector<float> margins;
  for (const PreferencePair& p : pairs) {
    margins.push_back(static_cast<float>(p.margin));
    b.index.push_back(p.index);
  }
  b.margin = torch::tensor(margins, torch::kFloat32);
  return b;
}

RolloutBatch both_sides(const PairBatch& b) {
  return {torch::cat({b.chosen.sequences, b.rejected.sequences}),
          torch::cat({b.chosen.attention_mask, b.rejected.attention_mask}),
          torch::cat({b.chosen.action_mask, b.rejected.action_mask})};
}

std::pair<torch::Tensor, torch::Tensor> split_sides(const torch::Tensor& values) {
  QUARTET_CHECK(values.defined() && values.dim() >= 1 && values.size(0) % 2 == 0,
                "split_sides: expected a result over 2N rows (chosen, then rejected)");
  const int64_t n = values.size(0) / 2;
  return {values.narrow(0, 0, n), values.narrow(0, n, n)};
}

}  // namespace quartet
