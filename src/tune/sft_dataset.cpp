#include "quartet/tune/sft_dataset.hpp"

#include "quartet/core/check.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/tune/sft_config.hpp"

namespace quartet {

int64_t SftExample::target_count() const {
  int64_t n = 0;
  for (uint8_t t : targets) n += t;
  return n;
}

SftExample tokenize_plain(const SftRow& row, const Tokenizer& tokenizer, bool loss_on_prompt) {
  SftExample e;
  e.where = row.where;
  e.prompt = row.prompt;
  e.response = row.response;
  e.ids = tokenizer.encode(row.prompt, /*add_special_tokens=*/true);
  e.prompt_length = static_cast<int64_t>(e.ids.size());
  std::vector<int64_t> response = tokenizer.encode(row.response, /*add_special_tokens=*/false);
  if (tokenizer.eos_id) response.push_back(*tokenizer.eos_id);
  e.ids.insert(e.ids.end(), response.begin(), response.end());
  e.targets.assign(e.ids.size(), 0);
  for (size_t t = loss_on_prompt ? 1 : static_cast<size_t>(e.prompt_length); t < e.ids.size(); ++t) e.targets[t] = 1;
  return e;
}

namespace {

SftExample from_prepared(const SftRow& row, bool loss_on_prompt) {
  SftExample e;
  e.where = row.where;
  e.prompt = row.prompt;
  e.response = row.response;
  e.ids = row.ids;
  e.targets = row.loss_mask;
  if (loss_on_prompt)
    for (size_t t = 1; t < e.targets.size(); ++t) e.targets[t] = 1;
  e.prompt_length = row.prompt_length;
  return e;
}

// A row's ids against the tokenizer and the length limit; "" when it fits.
std::string misfit(const SftExample& e, int64_t vocab, int64_t max_tokens) {
  for (size_t k = 0; k < e.ids.size(); ++k)
    if (e.ids[k] >= vocab)
      return "token " + std::to_string(k) + " is id " + std::to_string(e.ids[k]) + ", outside the actor's tokenizer (" +
             std::to_string(vocab) + " ids)";
  if (static_cast<int64_t>(e.ids.size()) > max_tokens)
    return "prompt and response are " + std::to_string(e.ids.size()) + " tokens, more than sft.max_tokens = " +
           std::to_string(max_tokens) + " (raise it, or leave the row out)";
  if (e.target_count() == 0) return "no token counts in the loss";
  return "";
}

}  // namespace

SftDataset::SftDataset(const std::vector<std::string>& files, const std::string& key, const Config& config,
                       const Tokenizer& tokenizer, const TokenizerIdentity& actor, int64_t limit) {
  const SftConfig& s = config.get<SftConfig>();
  for (const std::string& path : files) {
    std::vector<SftRow> rows;
    try {
      if (auto header = read_sft_header(path)) {
        const std::string problem = prompt_header_misfit(*header, actor);
        if (!problem.empty()) config.deck.fail(key, "names a file prepared for another actor: " + problem);
      }
      rows = read_sft_rows(path, s.prompt_field, s.response_field);
    } catch (const DeckError&) {
      throw;
    } catch (const Error& e) {
      config.deck.fail(key, std::string("names '") + path + "': " + e.what());
    }
    for (const SftRow& row : rows) {
      if (limit > 0 && size() >= limit) return;
      SftExample e;
      try {
        e = row.ids.empty() ? tokenize_plain(row, tokenizer, s.loss_on_prompt) : from_prepared(row, s.loss_on_prompt);
      } catch (const Error& err) {
        config.deck.fail(key, "names '" + path + "': " + row.where + ": " + err.what());
      }
      const std::string problem = misfit(e, tokenizer.vocab_size(), s.stage.max_tokens);
      if (!problem.empty()) config.deck.fail(key, "names '" + path + "': " + row.where + ": " + problem);
      examples_.push_back(std::move(e));
    }
  }
  if (limit > size())
    config.deck.fail("sft.eval_count", "is " + std::to_string(limit) + ", but " + key + " holds " +
                                           std::to_string(size()) + " rows");
}

TokenizerIdentity actor_identity(const Config& config) {
  const ModelSpec actor = resolve_model(config, Role::actor);
  return actor.random ? builtin_tokenizer_identity() : model_dir_identity(actor.dir);
}

}  // namespace quartet
