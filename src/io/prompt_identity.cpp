#include "quartet/io/prompt_identity.hpp"

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/sha256.hpp"
#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"

namespace quartet {

namespace {

// Enough of a digest to tell two apart at a glance; the files hold the whole of it.
std::string short_sha(const std::string& sha) { return sha.substr(0, 16); }

}  // namespace

TokenizerIdentity model_dir_identity(const std::string& dir) {
  TokenizerIdentity id;
  id.tokenizer_source = strip_trailing_slashes(dir) + "/tokenizer.json";
  id.prepare_dir = strip_trailing_slashes(dir);
  QUARTET_CHECK(is_regular_file(id.tokenizer_source), dir + ": no tokenizer.json");
  id.tokenizer_sha256 = sha256_file_hex(id.tokenizer_source);
  id.chat_template = find_chat_template(dir);
  if (id.chat_template) id.chat_template_sha256 = sha256_hex(id.chat_template->text);
  return id;
}

TokenizerIdentity builtin_tokenizer_identity() {
  TokenizerIdentity id;
  id.tokenizer_source = "quartet's built-in character tokenizer of random:<family> models";
  id.tokenizer_sha256 = sha256_hex(builtin_tokenizer_json());
  return id;
}

std::string prompt_header_misfit(const PromptFileHeader& h, const TokenizerIdentity& actor) {
  return prepared_file_misfit(h, actor, PreparedFileKind{});
}

std::string prepared_file_misfit(const PromptFileHeader& h, const TokenizerIdentity& model, const PreparedFileKind& k) {
  const std::string rows = k.rows, reader = k.reader, script = std::string("inputs/prepare/") + k.script;
  const std::string hint = model.prepare_dir.empty()
                               ? "`quartet tokenize random: --write-files DIR`, then " + script + " --model DIR"
                               : script + " --model " + model.prepare_dir;
  if (h.tokenizer_sha256 != model.tokenizer_sha256)
    return h.where + " says its " + rows + " were tokenized with " + h.tokenizer_source + " (sha256 " +
           short_sha(h.tokenizer_sha256) + "...), but the " + reader + "'s tokenizer is " + model.tokenizer_source +
           " (sha256 " + short_sha(model.tokenizer_sha256) + "...): their token ids differ; prepare the " + rows +
           " for the " + reader + " (" + hint + ")";
  if (!h.chat_template_applied) return "";
  if (!model.chat_template)
    return h.where + " says its " + rows + " were rendered with the chat template of " + h.chat_template_source +
           " (sha256 " + short_sha(h.chat_template_sha256) + "...), but the " + reader + " (" + model.tokenizer_source +
           ") has no chat template; prepare the " + rows + " for the " + reader + ", as raw " + rows + " (" + hint + ")";
  if (h.chat_template_sha256 != model.chat_template_sha256)
    return h.where + " says its " + rows + " were rendered with the chat template of " + h.chat_template_source +
           " (sha256 " + short_sha(h.chat_template_sha256) + "...), but the " + reader + "'s chat template, " +
           model.chat_template->source + ", is another (sha256 " + short_sha(model.chat_template_sha256) +
           "...); prepare the " + rows + " for the " + reader + " (" + hint + ")";
  return "";
}

}  // namespace quartet
