#include "quartet/model/tokenizer/same_token_ids.hpp"

namespace quartet {

std::string token_id_mismatch(const Tokenizer& actor, const Tokenizer& other) {
  const int64_t n = actor.vocab_size();
  if (other.vocab_size() < n)
    return "has " + std::to_string(other.vocab_size()) + " tokens, fewer than the actor's " + std::to_string(n);
  int64_t first = -1, differing = 0;
  for (int64_t id = 0; id < n; ++id) {
    if (actor.id_to_token(id) == other.id_to_token(id)) continue;
    if (first < 0) first = id;
    ++differing;
  }
  if (first < 0) return "";
  std::string out = "id " + std::to_string(first) + " is '" + actor.id_to_token(first) + "' for the actor but '" +
                    other.id_to_token(first) + "' here";
  if (differing > 1) out += " (and " + std::to_string(differing - 1) + " more ids differ)";
  return out;
}

}  // namespace quartet
