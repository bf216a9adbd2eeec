#include "quartet/rl/rewards/reward_retokenizer.hpp"

#include <torch/types.h>

#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/same_token_ids.hpp"
#include "quartet/model/tokenizer/utf8.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/prompt_dataset.hpp"

namespace quartet {

namespace {

const char* kPathKey = "model.reward.path";


std::string prepare_hint(const Config& config, const ModelSpec& reward) {
  const ModelSpec actor = resolve_model(config, Role::actor);
  return "prepare it with inputs/prepare/prepare_prompts.py --model " + (actor.random ? std::string("DIR") : actor.dir) +
         " --reward-model " + reward.dir +
         (actor.random ? " (the random: actor's tokenizer files: `quartet tokenize random: --write-files DIR`)" : "") +
         ", which renders each prompt for the reward model too (docs/rewards.md)";
}

// What one prompts file (rollout.prompts or eval.prompts) holds for the reward model; a deck
// error when it cannot serve it. `transform` is set from a rendering's header.
void check_prompts_for_reward(const Config& config, const char* key, const std::string& path, const ModelSpec& reward,
                              const TokenizerIdentity& id, std::string* transform) {
  const std::string why = "the reward model (" + std::string(kPathKey) + ") has a tokenizer of its own and reads "
                          "the rollouts as text";
  if (looks_like_hdf5(path))
    config.deck.fail(key, "is '" + path + "', pre-tokenised HDF5 prompts without their text, but " + why +
                              ": give the prompts as JSONL");
  std::optional<PromptFileHeader> header;
  try {
    header = prepared_prompts_header(path);
  } catch (const Error& e) {
    config.deck.fail(key, std::string("is '") + path + "': " + e.what());
  }
  const bool chat = id.chat_template.has_value();
  if (header && header->reward) {
    const RewardRendering& r = *header->reward;
    if (r.tokenizer_sha256 != id.tokenizer_sha256 || r.chat_template_sha256 != id.chat_template_sha256)
      config.deck.fail(key, "is '" + path + "', whose rows were rendered for the reward model of " + r.tokenizer_source +
                                (r.chat_template_source.empty() ? "" : " and " + r.chat_template_source) +
                                ", another tokenizer or chat template than " + id.tokenizer_source +
                                (chat ? " and " + id.chat_template->source : "") + "; " + prepare_hint(config, reward));
    *transform = r.completion_transform;
    return;
  }
  if (chat)
    config.deck.fail(key, "is '" + path + "', whose rows do not carry the reward model's chat rendering, but " + why +
                              " through its chat template (" + id.chat_template->source + "); " +
                              prepare_hint(config, reward));
  if (header && header->chat_template_applied)
    config.deck.fail(key, "is '" + path + "', rendered with the actor's chat template (" +
                              header->chat_template_source + "), but " + why +
                              ", and it has no chat template of its own to render the prompts with; give raw prompts "
                              "(prepare_prompts.py --prompt-format raw) or a reward model with a chat template");
}

// The log's line for a reward model that reads the rollouts as text.
std::string retokenizing_note(const RewardReading& r, const TokenizerIdentity& id, const std::string& mismatch) {
  std::string how = r.chat ? ", inside the conversation its chat template (" + id.chat_template->source + ") renders"
                           : ", after the prompt's text and followed by EOS";
  if (r.chat && r.completion_transform != "none")
    how += " (the reply's whitespace transformed as the template does: " + r.completion_transform + ")";
  return "reward model: its tokenizer is not the actor's (" + mismatch +
         "): each completion is decoded to text and tokenized with " + id.tokenizer_source + how;
}

}  // namespace

RewardReading reward_reading(const Config& config, const Tokenizer& actor_tokenizer) {
  RewardReading out;
  if (!has_model(config, Role::reward) || tokenizer_role(config) == Role::reward) return out;
  const ModelSpec spec = resolve_model(config, Role::reward);
  const std::string given = model_section(config, Role::reward).source;
  if (spec.random) {  // no tokenizer of its own: it reads the actor's ids, as a random critic does
    const std::string misfit = tokenizer_misfit(actor_tokenizer, spec.config);
    if (!misfit.empty()) config.deck.fail(kPathKey, "is '" + given + "': " + misfit);
    out.note = "reward model: random weights, reading the actor's token ids";
    return out;
  }
  if (!is_regular_file(spec.dir + "/tokenizer.json"))
    config.deck.fail(kPathKey, "is '" + given + "', which has no tokenizer.json: quartet can neither check that it "
                                                "reads the actor's token ids nor tokenize the rollouts for it (copy in "
                                                "the tokenizer files of the model it was trained from)");
  std::string mismatch, misfit;
  std::shared_ptr<const Tokenizer> own;
  try {
    own = load_model_tokenizer(spec.dir);
    misfit = tokenizer_misfit(*own, spec.config);
    mismatch = token_id_mismatch(actor_tokenizer, *own);
  } catch (const Error& e) {
    config.deck.fail(kPathKey, "is '" + given + "': " + e.what());
  }
  if (!misfit.empty()) config.deck.fail(kPathKey, "is '" + given + "': " + misfit);
  if (mismatch.empty()) {
    out.note = "reward model: reads the actor's token ids (its tokenizer gives every id the same token)";
    return out;
  }
  const TokenizerIdentity id = model_dir_identity(spec.dir);
  out.tokenizer = own;
  out.chat = id.chat_template.has_value();
  check_prompts_for_reward(config, "rollout.prompts", config.get<RolloutConfig>().prompts, spec, id, &out.completion_transform);
  if (!config.get<EvalConfig>().prompts.empty())
    check_prompts_for_reward(config, "eval.prompts", config.get<EvalConfig>().prompts, spec, id, &out.completion_transform);
  out.note = retokenizing_note(out, id, mismatch);
  return out;
}

int64_t RewardReading::pad_id() const {
  return tokenizer ? pad_id_of(*tokenizer) : 0;
}

RewardRetokenizer::RewardRetokenizer(const Config& config, const RewardReading& reading)
    : tokenizer_(reading.tokenizer), chat_(reading.chat), transform_(reading.completion_transform),
      pad_id_(reading.pad_id()), max_tokens_(resolve_model(config, Role::reward).config.position_limit()) {
  QUARTET_CHECK(tokenizer_, "RewardRetokenizer: the reward model reads the actor's ids, not text");
}

std::vector<int64_t> RewardRetokenizer::ids(const std::string& completion, const std::string& prompt,
                                            const std::string& record) const {
  std::vector<int64_t> out;
  const nlohmann::json row = record.empty() ? nlohmann::json() : nlohmann::json::parse(record, nullptr, false);
  const bool rendered = row.is_object() && row.contains("reward_prefix") && row.contains("reward_suffix");
  if (chat_) {
    QUARTET_CHECK(rendered && row["reward_prefix"].is_string() && row["reward_suffix"].is_string(),
                  "reward model: the prompt row has no string reward_prefix and reward_suffix (" + prompt.substr(0, 60) +
                      "...)");
    const std::string reply = transform_completion(completion, transform_);
    out = tokenizer_->encode(row["reward_prefix"].get<std::string>() + reply + row["reward_suffix"].get<std::string>(),
                             /*add_special_tokens=*/false);
  } else {
    const std::string text = rendered && row["reward_prefix"].is_string() ? row["reward_prefix"].get<std::string>() : prompt;
    out = tokenizer_->encode(text, /*add_special_tokens=*/true);
    const std::vector<int64_t> reply = tokenizer_->encode(completion, /*add_special_tokens=*/false);
    out.insert(out.end(), reply.begin(), reply.end());
    if (tokenizer_->eos_id) out.push_back(*tokenizer_->eos_id);
  }
  QUARTET_CHECK(!out.empty(), "reward model: a rollout tokenizes to no tokens (prompt " + prompt.substr(0, 60) + ")");
  QUARTET_CHECK(static_cast<int64_t>(out.size()) <= max_tokens_,
                "reward model: a rollout is " + std::to_string(out.size()) + " of its tokens, more than its " +
                    std::to_string(max_tokens_) + " positions (prompt " + prompt.substr(0, 60) + "...)");
  return out;
}

RolloutBatch RewardRetokenizer::batch(const std::vector<std::string>& completions, const std::vector<std::string>& prompts,
                                      const std::vector<std::string>& records) const {
  QUARTET_CHECK(completions.size() == prompts.size() && prompts.size() == records.size(),
                "reward model: completions, prompts and records differ in number");
  std::vector<std::vector<int64_t>> rows;
  for (size_t r = 0; r < completions.size(); ++r) rows.push_back(ids(completions[r], prompts[r], records[r]));
  auto [sequences, mask] = left_pad(rows, pad_id_);
  return {sequences, mask, mask.narrow(1, mask.size(1) - 1, 1).contiguous()};
}

std::string transform_completion(const std::string& completion, const std::string& transform) {
  if (transform == "strip") return strip_unicode_whitespace(completion);
  if (transform == "lstrip_newlines") return completion.substr(std::min(completion.find_first_not_of('\n'), completion.size()));
  return completion;
}

std::string strip_unicode_whitespace(const std::string& s) {
  // Python's str.isspace(): the characters of Unicode's White_Space property plus U+001C..U+001F.
  auto space = [](char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
  };
  size_t begin = 0, end = s.size();
  for (size_t i = 0; i < s.size();) {
    if (!space(next_code_point(s, i))) break;
    begin = i;
  }
  // From the end: step back over continuation bytes to each code point's lead.
  while (end > begin) {
    size_t lead = end - 1;
    while (lead > begin && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
    size_t i = lead;
    if (!space(next_code_point(s, i))) break;
    end = lead;
  }
  return s.substr(begin, end - begin);
}

}  // namespace quartet
