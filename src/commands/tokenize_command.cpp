#include "quartet/commands/tokenize_command.hpp"

#include <iostream>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/core/hf_cache.hpp"
#include "quartet/model/tokenizer.hpp"

namespace quartet {

int tokenize_stream(const CommandLine& cl, std::istream& in, std::ostream& out) {
  auto tokenizer = load_model_tokenizer(is_hf_path(cl.operand) ? resolve_hf_path(cl.operand) : cl.operand);
  const bool decode = cl.has("decode"), special = !cl.has("no-special");
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (decode) {
      std::vector<int64_t> ids;
      std::istringstream words(line);
      std::string word;
      while (words >> word) {
        std::size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
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
