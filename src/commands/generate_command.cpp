#include "quartet/commands/generate_command.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/gather_text.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/io/prompts.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/model/weight_map.hpp"

namespace quartet {
namespace {

struct Plan {
  std::vector<Prompt> prompts;
  std::unique_ptr<Tokenizer> tokenizer;
  SamplingSetup setup;  // stops, pad, vocabulary limit (engine/sampling_setup.hpp)
  // A prepared file's rows carry their ids (made for this tokenizer: checked); plain ones are
  // tokenized here.
  std::vector<int64_t> ids(size_t i) const {
    return prompts[i].ids.empty() ? tokenizer->encode(prompts[i].text) : prompts[i].ids;
  }
};

// A prepared prompts file made for another tokenizer or chat template than the actor's, or with
// ids outside its vocabulary, is refused naming the files and the line.
void check_prepared_prompts(const Config& cfg, const Plan& plan) {
  const auto header = read_prompt_header(cfg.get<RolloutConfig>().prompts);
  if (!header) return;
  const std::string misfit = prompt_header_misfit(*header, model_dir_identity(cfg.get<ModelsConfig>().actor.path));
  if (!misfit.empty()) cfg.deck.fail("rollout.prompts", "names a file prepared for another actor: " + misfit);
  for (const Prompt& p : plan.prompts)
    for (int64_t id : p.ids)
      QUARTET_CHECK(id < plan.tokenizer->vocab_size(),
                    cfg.get<RolloutConfig>().prompts + ":" + std::to_string(p.line) + ": prompt id " + std::to_string(id) +
                        " is outside the actor tokenizer's vocabulary of " + std::to_string(plan.tokenizer->vocab_size()));
}

// The model loads (its weights by model/weight_map.hpp's rules, headers only), takes the
// tokenizer's ids and every prompt with its new tokens: refused up front on every rank alike,
// naming the tensor, the file or the prompt, rather than failing inside an embedding lookup.
void check_model_fits_prompts(const Config& cfg, const Plan& plan) {
  const ModelConfig model = ModelConfig::from_json_file(cfg.get<ModelsConfig>().actor.path + "/config.json");
  map_weights(SafetensorsCheckpoint(cfg.get<ModelsConfig>().actor.path), model, Head::causal_lm, HeadSource::checkpoint);
  const std::string misfit = tokenizer_misfit(*plan.tokenizer, model);
  if (!misfit.empty()) cfg.deck.fail("model.actor.path", "is '" + cfg.get<ModelsConfig>().actor.path + "': " + misfit);
  const int64_t limit = model.position_limit();
  for (size_t i = 0; i < plan.prompts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(plan.ids(i).size());
    if (n + cfg.get<RolloutConfig>().max_new_tokens > limit)
      cfg.deck.fail("rollout.max_new_tokens",
                    "is " + std::to_string(cfg.get<RolloutConfig>().max_new_tokens) + ", and the prompt on " + cfg.get<RolloutConfig>().prompts +
                        ":" + std::to_string(plan.prompts[i].line) + " has " + std::to_string(n) + " tokens: together more than the " +
                        std::to_string(limit) + " learned positions (n_positions) of " + cfg.get<ModelsConfig>().actor.path);
  }
}

}  // namespace

int run_generate(Runtime& rt, const CommandLine& cl) {
  const Config& cfg = rt.config;
  // Everything that can be refused is checked on every rank alike, before any model is loaded.
  Plan plan;
  bool ok = rt.world.agree([&] {
    if (cfg.get<ModelsConfig>().actor.path.empty())
      cfg.deck.fail("model.actor.path", "is not set: generate needs the actor's model directory");
    if (cfg.get<RolloutConfig>().prompts.empty())
      cfg.deck.fail("rollout.prompts", "is not set: generate needs a prompts file");
    plan.prompts = read_prompts(cfg.get<RolloutConfig>().prompts);
    plan.tokenizer = load_model_tokenizer(cfg.get<ModelsConfig>().actor.path);
    plan.setup = sampling_setup(cfg, *plan.tokenizer, resolve_model(cfg, Role::actor));
    check_prepared_prompts(cfg, plan);
    check_model_fits_prompts(cfg, plan);
  });
  if (!ok) return 2;

  const Group& actor = rt.groups->of(Role::actor);
  std::string mine;
  if (actor.member()) {
    auto model = load_model(cfg.get<ModelsConfig>().actor.path, Head::causal_lm, dtype_from_name(cfg.get<ModelsConfig>().actor.dtype), rt.device);
    model->eval();
    SamplingParams params = rollout_sampling(cfg, plan.setup);
    params.seed = cfg.get<RunConfig>().seed + static_cast<uint64_t>(actor.rank);  // ranks sample differently

    // Prompts i with i % group size == group rank are this rank's.
    std::vector<size_t> todo;
    for (size_t i = static_cast<size_t>(actor.rank); i < plan.prompts.size();
         i += static_cast<size_t>(actor.size()))
      todo.push_back(i);
    for (size_t at = 0; at < todo.size(); at += static_cast<size_t>(cfg.get<RolloutConfig>().batch)) {
      std::vector<size_t> batch(todo.begin() + static_cast<long>(at),
                                todo.begin() + static_cast<long>(std::min(todo.size(), at + static_cast<size_t>(cfg.get<RolloutConfig>().batch))));
      std::vector<std::vector<int64_t>> encoded;
      for (size_t i : batch) encoded.push_back(plan.ids(i));
      auto [ids, mask] = left_pad(encoded, plan.setup.pad_id);
      Generation g = generate(model, ids.to(rt.device), mask.to(rt.device), params);
      auto tokens = g.tokens.cpu();
      auto lengths = g.new_lengths.cpu();
      const int64_t prompt_len = ids.size(1);
      for (size_t b = 0; b < batch.size(); ++b) {
        auto row = tokens[static_cast<int64_t>(b)].slice(0, prompt_len, prompt_len + lengths[static_cast<int64_t>(b)].item<int64_t>());
        std::vector<int64_t> out(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
        nlohmann::json j = {{"index", batch[b]},
                            {"prompt", plan.prompts[batch[b]].text},
                            {"completion", plan.tokenizer->decode(out, /*skip_special_tokens=*/true)},
                            {"prompt_tokens", encoded[b].size()},
                            {"tokens", out}};
        mine += j.dump() + "\n";
      }
    }
    // Actor rank 0 collects every rank's lines and puts them in prompt order.
    std::vector<nlohmann::json> results;
    for (const auto& text : gather_text(actor.comm, mine)) {
      size_t start = 0, end;
      while ((end = text.find('\n', start)) != std::string::npos) {
        results.push_back(nlohmann::json::parse(text.substr(start, end - start)));
        start = end + 1;
      }
    }
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) {
      return a["index"].template get<size_t>() < b["index"].template get<size_t>();
    });

    if (actor.rank == 0) {
      make_directories(cfg.get<RunConfig>().out);
      const std::string path = cfg.get<RunConfig>().out + "/generations.jsonl";
      std::string text;
      for (const auto& j : results) text += j.dump() + "\n";
      write_text_atomically(path, text);
      for (const auto& j : results) {
        std::printf("[%zu] %s|%s\n", j["index"].get<size_t>(), j["prompt"].get<std::string>().c_str(),
                    j["completion"].get<std::string>().c_str());
      }
      std::printf("generate: %zu completions by %d actor rank(s) -> %s\n", results.size(),
                  actor.size(), path.c_str());
      std::fflush(stdout);

      if (cl.has("logits")) {
        std::vector<std::vector<int64_t>> all;
        for (size_t i = 0; i < plan.prompts.size(); ++i) all.push_back(plan.ids(i));
        auto [ids, mask] = left_pad(all, plan.setup.pad_id);
        torch::NoGradGuard no_grad;
        auto logits = model->forward(ids.to(rt.device), mask.to(rt.device)).to(torch::kFloat).cpu();
        write_tensors_h5(cl.options.at("logits"),
                         {{"input_ids", ids}, {"attention_mask", mask}, {"logits", logits}});
        std::printf("generate: logits [%lld, %lld, %lld] -> %s\n",
                    static_cast<long long>(logits.size(0)), static_cast<long long>(logits.size(1)),
                    static_cast<long long>(logits.size(2)), cl.options.at("logits").c_str());
      }
    }
  }
  return rt.world.all_ok(true) ? 0 : 1;
}

}  // namespace quartet
