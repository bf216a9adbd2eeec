#pragma once
// Whether a second model reads the actor's token ids as the actor means them. The critic and the
// reference are given the actor's sequences as ids, so each id the actor can produce must be the
// same token in their vocabularies; a model of another tokenizer would score text it was never
// shown, silently. (A reward model that differs reads the rollouts as text instead:
// rl/rewards/reward_retokenizer.hpp.)
#include <string>

#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

// "" when every id below actor.vocab_size() is the same token in `other`; otherwise what
// differs, e.g. "has 32000 tokens, fewer than the actor's 32064" or "id 17 is 'ab' for the
// actor but 'a' here (and 29 more ids differ)".
std::string token_id_mismatch(const Tokenizer& actor, const Tokenizer& other);

}  // namespace quartet
