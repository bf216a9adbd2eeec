#pragma once
// Which model a role holds, resolved from its [model.<role>] section before anything is loaded:
// the shape (config.json of a Hugging Face directory, a random:FILE.json, or random:<family>
// sized by the section's keys), the head the role needs, the dtype and whether it is trained.
//   actor, reference  causal_lm          (reference: the actor's path when its own is empty)
//   critic            token_value        (trained)
//   reward            sequence_reward    (frozen, but trained by `quartet rm`; no path = a rule
//                                        reward, no model)
// Errors name the deck key (file:line).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/model/transformer.hpp"

namespace quartet {

struct ModelSpec {
  Role role = Role::actor;
  ModelConfig config;
  Head head = Head::causal_lm;
  std::string dir;      // the Hugging Face directory to load weights from; "" for random weights
  bool random = false;  // random weights (random:FILE.json or random:<family>)
  torch::ScalarType dtype = torch::kFloat32;
  bool trained = false;  // actor and critic; the reward in an rm deck
};

Head head_of(Role role);
// Whether the deck's command trains the role: train the actor and critic (the sft deck's actor
// too), quartet rm (an rm deck, rm.data set) the reward model.
bool is_trained(const Config& config, Role role);
// The role whose tokenizer is the run's: the actor's, or in an rm deck the reward model's.
Role tokenizer_role(const Config& config);
// The [model.<role>] section of the config.
const ModelSectionConfig& model_section(const Config& config, Role role);
// "float32" | "bfloat16" | "float16" as a dtype; anything else is a quartet::Error.
torch::ScalarType dtype_from_name(const std::string& name);
// The reverse, for files and messages: "float32" | "bfloat16" | "float16" (other types by
// c10's name).
std::string dtype_name(torch::ScalarType dtype);

// The built-in character tokenizer of random:<family> models without a vocabulary of their
// own (model.<role>.vocab = 0): printable ASCII (space to '~') after <pad>, <bos>, <eos>.
extern const char* const kBuiltinAlphabet;
std::unique_ptr<Tokenizer> make_builtin_tokenizer();
int64_t builtin_vocab_size();

// False for a role whose section names no model and that may go without one: the reward with
// an empty path (a rule reward). The reference falls back to the actor's path.
bool has_model(const Config& config, Role role);

// The role's model. A missing path (actor, critic), an unreadable or unsupported config.json,
// or sizes that do not fit together are DeckErrors naming model.<role>.path (or the size key).
ModelSpec resolve_model(const Config& config, Role role);

// "" when every id `tokenizer` can produce has a row in the embedding of a model of `config`,
// else what does not fit (a tokenizer larger than the model's vocab_size would fail inside the
// embedding lookup, naming nothing).
std::string tokenizer_misfit(const Tokenizer& tokenizer, const ModelConfig& config);

// Exact parameter counts per sharding unit: [0] = root (embeddings, position embeddings, final
// norm, head: everything outside the blocks), [1 + i] = block i. Counted on a model built on the
// meta device, so nothing is allocated whatever the size.
std::vector<int64_t> unit_parameter_counts(const ModelConfig& config, Head head);

}  // namespace quartet
