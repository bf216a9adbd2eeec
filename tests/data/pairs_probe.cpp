// What quartet reads from a pairs file, for tests/data/check_prepared_pairs.py:
//   pairs_probe FILE MODEL_DIR|builtin MAX_TOKENS
// reads FILE with tune/pair_dataset.hpp, with the tokenizer of MODEL_DIR (or the built-in one) and
// the refusal of a prepared file made for another tokenizer or template, and prints one JSON
// object: {"prepared": bool, "pairs": [{"where", "prompt", "chosen", "rejected", "margin"}, ...]}.
// A refusal is printed to stderr, exit status 1.
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/tune/pair_dataset.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FILE MODEL_DIR|builtin MAX_TOKENS\n", argv[0]);
    return 2;
  }
  try {
    const std::string file = argv[1], model = argv[2];
    const bool builtin = model == "builtin";
    auto tokenizer = builtin ? quartet::make_builtin_tokenizer() : quartet::load_model_tokenizer(model);
    const quartet::TokenizerIdentity identity =
        builtin ? quartet::builtin_tokenizer_identity() : quartet::model_dir_identity(model);
    quartet::PairDataset d(file, *tokenizer, std::stoll(argv[3]), &identity);
    nlohmann::json out = {{"prepared", d.prepared()}, {"pairs", nlohmann::json::array()}};
    for (int64_t i = 0; i < d.size(); ++i) {
      const quartet::PreferencePair p = d.get(i);
      out["pairs"].push_back({{"where", d.where(i)}, {"prompt", p.prompt}, {"chosen", p.chosen},
                              {"rejected", p.rejected}, {"margin", p.margin}});
    }
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pairs_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
