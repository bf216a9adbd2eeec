// The deck's [kernels] and [profile] sections (core/kernels_config.hpp): their defaults follow
// the build, given values are typed and checked, a device kernel switched on in a build without
// device kernels is refused naming the key and its line, both sections are in the resolved deck
// (what run.h5 records) and in `quartet train --help`, and the installed switches reach the
// kernel families' own switches (core/kernel_switch.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/cli.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/kernel_switch.hpp"
#include "quartet/core/kernels_config.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/engine/profile_config.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/packed_linear.hpp"
#include "quartet/model/rotary_kernel.hpp"
#include "quartet/model/swiglu_kernel.hpp"
#include "quartet/shard/adamw_kernel.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_kernels_config {

namespace {

Deck deck_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return Deck("test.deck", text, overrides, deck_schema());
}

// The DeckError message of loading [kernels], or "" when it accepts the deck.
std::string kernels_error(const std::string& text, bool kernels_built) {
  try {
    kernels_section(kernels_built).load(deck_of(text));
  } catch (const DeckError& e) {
    return e.what();
  }
  return "";
}

const char* kDeviceKeysOff = R"([kernels]
decode = false
decode_fused_qkv = false
decode_attention = false
rotary = false
swiglu = false
adamw = false
)";

}  // namespace

TEST(KernelsConfig, DefaultsFollowTheBuild) {
  const Config c = load_config(deck_of(""));
  const bool built = device_kernels_built();
  for (bool on : {c.get<KernelsConfig>().decode, c.get<KernelsConfig>().decode_fused_qkv, c.get<KernelsConfig>().decode_attention, c.get<KernelsConfig>().rotary,
                  c.get<KernelsConfig>().swiglu, c.get<KernelsConfig>().adamw})
    EXPECT_EQ(on, built);
  EXPECT_TRUE(c.get<KernelsConfig>().packed_products);
  EXPECT_TRUE(c.get<KernelsConfig>().unmasked_attention);
  EXPECT_EQ(c.get<ProfileConfig>().iteration, 0);
  EXPECT_TRUE(c.get<ProfileConfig>().host);
}

TEST(KernelsConfig, GivenValuesAreTyped) {
  const Config c = load_config(deck_of(std::string(kDeviceKeysOff) +
                                       "packed_products = false\nunmasked_attention = false\n"
                                       "[profile]\niteration = 3\nhost = false\n"));
  EXPECT_FALSE(c.get<KernelsConfig>().decode || c.get<KernelsConfig>().decode_fused_qkv || c.get<KernelsConfig>().decode_attention || c.get<KernelsConfig>().rotary ||
               c.get<KernelsConfig>().swiglu || c.get<KernelsConfig>().adamw);
  EXPECT_FALSE(c.get<KernelsConfig>().packed_products);
  EXPECT_FALSE(c.get<KernelsConfig>().unmasked_attention);
  EXPECT_EQ(c.get<ProfileConfig>().iteration, 3);
  EXPECT_FALSE(c.get<ProfileConfig>().host);
}

TEST(KernelsConfig, DeviceKernelRefusedWhereTheBuildHasNone) {
  // Line 5 of the deck: rotary.
  std::string text = kDeviceKeysOff;
  text.replace(text.find("rotary = false"), 14, "rotary = true");
  const std::string e = kernels_error(text, /*kernels_built=*/false);
  EXPECT_NE(e.find("test.deck:5"), std::string::npos) << e;
  EXPECT_NE(e.find("kernels.rotary"), std::string::npos) << e;
  EXPECT_NE(e.find("no device kernels"), std::string::npos) << e;
  EXPECT_EQ(kernels_error(text, /*kernels_built=*/true), "");
  // Every device key off, or a build with them: accepted; the paths without kernels of their own
  // are never refused.
  EXPECT_EQ(kernels_error(std::string(kDeviceKeysOff) + "packed_products = true\n", false), "");
  EXPECT_EQ(kernels_error("", device_kernels_built()), "");
  // An override is named as such.
  try {
    kernels_section(false).load(deck_of(kDeviceKeysOff, {"kernels.adamw=true"}));
    ADD_FAILURE() << "kernels.adamw=true accepted without device kernels";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("--set kernels.adamw=true"), std::string::npos) << e.what();
  }
}

TEST(KernelsConfig, ProfileIterationChecked) {
  try {
    load_config(deck_of("[profile]\niteration = -1\n"));
    ADD_FAILURE() << "profile.iteration = -1 accepted";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("test.deck:2: profile.iteration"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_config(deck_of("[profile]\nhost = maybe\n")), DeckError);
  EXPECT_THROW(load_config(deck_of("[kernels]\nrotray = false\n")), DeckError);
}

// run.h5 records the resolved deck (RunFileInfo::deck): both sections are in it, with their values.
TEST(KernelsConfig, InTheResolvedDeckAndTheHelp) {
  const Deck d = deck_of("", {"kernels.packed_products=false", "profile.iteration=2"});
  const std::string resolved = d.resolved();
  EXPECT_NE(resolved.find("[kernels]\n"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("packed_products = false\n"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("[profile]\niteration = 2\n"), std::string::npos) << resolved;
  // Read back: the two sections as they were recorded.
  const Deck recorded = deck_of(resolved.substr(resolved.find("[kernels]")));
  EXPECT_FALSE(kernels_section().load(recorded).packed_products);
  EXPECT_EQ(profile_section().load(recorded).iteration, 2);
  const std::string help = command_help(CommandSpec{"train", "train"}, deck_schema());
  EXPECT_NE(help.find("  [kernels]\n    decode = "), std::string::npos) << help;
  EXPECT_NE(help.find("    unmasked_attention = true"), std::string::npos) << help;
  EXPECT_NE(help.find("  [profile]\n    iteration = 0"), std::string::npos) << help;
}

// use_kernels (what start_runtime calls with the deck's section) reaches every family's switch,
// and each family's set_*() changes its member of the installed section alone;
// kernels.unmasked_attention = false gives every batch its mask (engine/experience.hpp).
TEST(KernelSwitches, InstalledSectionReachesTheFamilies) {
  const KernelsConfig before = kernels_in_use();
  KernelsConfig k;
  k.packed_products = false;
  k.unmasked_attention = false;
  use_kernels(k);
  EXPECT_FALSE(packed_products_enabled());
  EXPECT_FALSE(kernels_in_use().unmasked_attention);
  // Prompts of one length, padding after the completions: trailing, unless every batch keeps its mask.
  const auto ids = torch::ones({2, 5}, torch::kLong);
  const RolloutBatch trailing{ids, torch::tensor({1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, torch::kLong).view({2, 5}),
                              torch::ones({2, 2}, torch::kLong)};
  EXPECT_EQ(padding_layout(trailing), PaddingLayout::anywhere);
  EXPECT_EQ(rotary_kernel_enabled(), device_kernels_built());
  EXPECT_EQ(swiglu_kernel_enabled(), device_kernels_built());
  EXPECT_EQ(adamw_kernel_enabled(), device_kernels_built());
  EXPECT_EQ(decode_kernels_enabled(), device_kernels_built());
  EXPECT_EQ(decode_qkv_fused_enabled(), device_kernels_built());
  EXPECT_EQ(decode_attention_enabled(), device_kernels_built());
  set_packed_products(true);
  EXPECT_TRUE(kernels_in_use().packed_products);
  set_rotary_kernel(false);
  EXPECT_FALSE(rotary_kernel_enabled());
  EXPECT_FALSE(kernels_in_use().rotary);
  EXPECT_EQ(kernels_in_use().swiglu, device_kernels_built());
  if (device_kernels_built()) {
    set_rotary_kernel(true);
    EXPECT_TRUE(rotary_kernel_enabled());
  } else {
    // Refused naming the setter; the deck refuses it naming the key (above).
    try {
      set_rotary_kernel(true);
      ADD_FAILURE() << "set_rotary_kernel(true) accepted without device kernels";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("set_rotary_kernel"), std::string::npos) << e.what();
    }
    k.adamw = true;
    EXPECT_THROW(use_kernels(k), Error);
  }
  use_kernels(before);
  EXPECT_EQ(padding_layout(trailing), before.unmasked_attention ? PaddingLayout::trailing : PaddingLayout::anywhere);
}

}  // namespace test_kernels_config
