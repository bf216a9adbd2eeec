#include "quartet/commands/tokenize_command.hpp"

#include <iostream>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/hf_cache.hpp"
#include "quartet/core/units.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

namespace {

// random:<anything> (as model.<role>.path says it) is the built-in character tokenizer.
bool names_builtin(const std::string& operand) { return operand.rfind("random:", 0) == 0; }

// The built-in tokenizer as Hugging Face files, for tools that need a model directory
// (inputs/prepare/prepare_prompts.py --model DIR).
int write_builtin_files(const CommandLine& cl, std::ostream& out) {
  QUARTET_CHECK(names_builtin(cl.operand), "--write-files writes the built-in tokenizer's files: give random: "
                                           "(not '" + cl.operand + "', whose files are already there)");
  const std::string dir = cl.options.at("write-files");
  make_directories(dir);
  // A length no prompt reaches: transformers only warns past it; the deck sets the real limits.
  write_builtin_tokenizer_files(dir, int64_t{1} << 30);
  out << "tokenize: the built-in character tokenizer -> " << dir
      << "/{tokenizer.json,tokenizer_config.json,special_tokens_map.json}\n";
  return 0;
}

}  // namespace

int tokenize_stream(const CommandLine& cl, std::istream& in, std::ostream& out) {
  if (cl.has("write-files")) return write_builtin_files(cl, out);
  auto tokenizer = names_builtin(cl.operand)  ? make_builtin_tokenizer()
                   : is_hf_path(cl.operand) ? load_model_tokenizer(resolve_hf_path(cl.operand))
                                            : load_model_tokenizer(cl.operand);
  const bool decode = cl.has("decode"), special = !cl.has("no-special");
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (decode) {
      std::vector<int64_t> ids;
      std::istringstream words(line);
      std::string word;
      while (words >> word) {
        std::size_t used = 0;
        const long long id = leading_integer(word, &used);
        QUARTET_CHECK(used == word.size() && id >= 0,
                      "standard input line " + std::to_string(lineno) + ": '" + word +
                          "' is not a token id");
        ids.push_back(id);
      }
      out << tokenizer->decode(ids, !special) << "\n";
    } else {
      auto ids = tokenizer->encode(line, special);
      for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
      out << "\n";
    }
  }
  return 0;
}

int run_tokenize(const CommandLine& cl) { return tokenize_stream(cl, std::cin, std::cout); }

}  // namespace quartet
