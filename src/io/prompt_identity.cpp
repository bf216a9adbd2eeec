#include "quartet/io/prompt_identity.hpp"

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/sha256.hpp"
#include "quartet/model/builtin_tokenizer_files.hpp"

namespace quartet {

namespace {

// Enough of a digest to tell two apart at a glance; the files hold the whole of it.
std::string short_sha(const std::string& sha) { return sha.substr(0, 16); }

}  // namespace

TokenizerIdentity model_dir_identity(const std::string& dir) {
  TokenizerIdentity id;
  id.tokenizer_source = strip_trailing_slashes(dir) + "/tokenizer.json";
  id.prepare_hint = "inputs/prepare/prepare_prompts.py --model " + strip_trailing_slashes(dir);
  QUARTET_CHECK(is_regular_file(id.tokenizer_source), dir + ": no tokenizer.json");
  id.tokenizer_sha256 = sha256_file_hex(id.tokenizer_source);
  id.chat_template = find_chat_template(dir);
  if (id.chat_template) id.chat_template_sha256 = sha256_hex(id.chat_template->text);
  return id;
}

TokenizerIdentity builtin_tokenizer_identity() {
  TokenizerIdentity id;
  id.tokenizer_source = "quartet's built-in character tokenizer of random:<family> models";
  id.prepare_hint = "`quartet tokenize random: --write-files DIR`, then inputs/prepare/prepare_prompts.py --model DIR";
  id.tokenizer_sha256 = sha256_hex(builtin_tokenizer_json());
  return id;
}

std::string prompt_header_misfit(const PromptFileHeader& h, const TokenizerIdentity& actor) {
  if (h.tokenizer_sha256 != actor.tokenizer_sha256)
    return h.where + " says its prompts were tokenized with " + h.tokenizer_source + " (sha256 " +
           short_sha(h.tokenizer_sha256) + "...), but the actor's tokenizer is " + actor.tokenizer_source +
           " (sha256 " + short_sha(actor.tokenizer_sha256) +
           "...): their token ids differ; prepare the prompts for the actor (" + actor.prepare_hint + ")";
  if (!h.chat_template_applied) return "";
  if (!actor.chat_template)
    return h.where + " says its prompts were rendered with the chat template of " + h.chat_template_source +
           " (sha256 " + short_sha(h.chat_template_sha256) + "...), but the actor (" + actor.tokenizer_source +
           ") has no chat template; prepare the prompts for the actor, as raw prompts (" + actor.prepare_hint + ")";
  if (h.chat_template_sha256 != actor.chat_template_sha256)
    return h.where + " says its prompts were rendered with the chat template of " + h.chat_template_source +
           " (sha256 " + short_sha(h.chat_template_sha256) + "...), but the actor's chat template, " +
           actor.chat_template->source + ", is another (sha256 " + short_sha(actor.chat_template_sha256) +
           "...); prepare the prompts for the actor (" + actor.prepare_hint + ")";
  return "";
}

}  // namespace quartet
