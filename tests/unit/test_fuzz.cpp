// Fuzzers of every file quartet reads from a user: safetensors headers, config.json,
// tokenizer.json, decks and checkpoint directories. Each mutates real files (made in this test
// run: the parity fixtures' models and tokenizers, the io_checkpoints fixture's checkpoints) a
// bounded number of times from a fixed seed, and hands each mutant to the reader. A mutant must
// be read or refused with a quartet::Error: any other exception, a crash (the test dies) or a
// hang (a case past kCaseSeconds: the test aborts naming it) is a failure, reported with its
// seed and mutation so that it can be replayed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"
#include "quartet/core/files.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "quartet/io/checkpoint_summary.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "test_main.hpp"

using json = nlohmann::json;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_fuzz {

namespace {

constexpr int kMutants = 1000;         // per target and run
constexpr double kCaseSeconds = 20.0;  // one mutant's reading; far above any real case
constexpr std::uint64_t kSeed = 20261204;

std::string env_dir(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// (POSIX through core/files, not std::filesystem: libtorch.so exports its own copies of
// std::filesystem's functions, which may bind in place of libstdc++'s and crash.)
using quartet::read_file;

void write_file(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

void copy_directory(const std::string& from, const std::string& to) {
  quartet::make_directories(to);
  for (const auto& name : quartet::list_directory(from)) write_file(to + "/" + name, read_file(from + "/" + name));
}

// A watchdog for the case in progress: a case that runs past kCaseSeconds is a hang; the test
// cannot interrupt it, so it names the case and ends the process (ctest sees the failure).
class HangGuard {
 public:
  HangGuard() : thread_([this] { watch(); }) {}
  ~HangGuard() {
    stop_ = true;
    thread_.join();
  }
  void begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    started_ = std::chrono::steady_clock::now();
    busy_ = true;
  }
  void end() { busy_ = false; }

 private:
  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mutex_);
      if (busy_ && std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() > kCaseSeconds) {
        std::fprintf(stderr, "fuzz: HANG: %s ran over %.0f s\n", what_.c_str(), kCaseSeconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }
  std::mutex mutex_;
  std::string what_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> busy_{false}, stop_{false};
  std::thread thread_;
};

// Runs `read` on one mutant: fine if it returns or throws quartet::Error; any other exception
// is recorded as a failure naming the mutant.
struct Outcomes {
  int read = 0, refused = 0;
  std::vector<std::string> failures;
};

void try_case(HangGuard& guard, Outcomes& o, const std::string& what, const std::function<void()>& read) {
  guard.begin(what);
  try {
    read();
    ++o.read;
  } catch (const quartet::Error&) {
    ++o.refused;
  } catch (const std::exception& e) {
    o.failures.push_back(what + ": " + typeid(e).name() + ": " + e.what());
  } catch (...) {
    o.failures.push_back(what + ": a non-standard exception");
  }
  guard.end();
}

void report(const char* target, const Outcomes& o) {
  std::printf("fuzz %-12s %d mutants: %d read, %d refused with a quartet::Error, %zu other failures\n", target,
              o.read + o.refused + static_cast<int>(o.failures.size()), o.read, o.refused, o.failures.size());
  for (size_t i = 0; i < o.failures.size() && i < 10; ++i) ADD_FAILURE() << o.failures[i];
}

// ---- mutations --------------------------------------------------------------------------------

// Values that break readers: extremes, wrong types, non-finite numbers.
json nasty_value(std::mt19937_64& rng) {
  static const std::vector<json> values = {
      json(0), json(-1), json(-3), json(1), json(2), json(99999), json(int64_t(1) << 31), json(int64_t(1) << 62),
      json(std::numeric_limits<int64_t>::max()), json(std::numeric_limits<int64_t>::min()),
      json(std::numeric_limits<uint64_t>::max()), json(1e308), json(-1e308), json(0.5), json(4096.0), json(1e-320),
      json(""), json("x"), json("F32"), json("I32"), json("BOOL"), json("llama"), json(nullptr), json(true),
      json::array(), json::array({1, 2}), json::array({-1}), json::array({0, 0}), json::object(),
      json(std::string(70000, 'a'))};
  return values[rng() % values.size()];
}

// One structural mutation somewhere in a JSON document: a value replaced, a key removed, an
// element duplicated or a nested value replaced by the whole of another node.
void mutate_json(json& j, std::mt19937_64& rng, int depth = 0) {
  if (!j.is_structured() || j.empty() || depth > 6) {
    j = nasty_value(rng);
    return;
  }
  const size_t n = j.size();
  const size_t pick = rng() % n;
  auto it = j.begin();
  std::advance(it, static_cast<long>(pick));
  switch (rng() % 5) {
    case 0:
      *it = nasty_value(rng);
      return;
    case 1:
      if (j.is_object()) j.erase(it.key());
      else j.erase(pick);
      return;
    case 2:
      if (j.is_array()) j.push_back(*it);
      else j["fuzz_extra_" + std::to_string(rng() % 100)] = *it;
      return;
    default:
      mutate_json(*it, rng, depth + 1);
  }
}

// Byte-level damage: flips, overwrites, insertions, deletions, truncation, appended bytes.
std::string mutate_bytes(std::string s, std::mt19937_64& rng, size_t begin = 0) {
  if (s.size() <= begin) return s + "\x01";
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && s.size() > begin; ++e) {
    const size_t at = begin + rng() % (s.size() - begin);
    switch (rng() % 6) {
      case 0: s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8))); break;
      case 1: s[at] = static_cast<char>(rng() % 256); break;
      case 2: s.insert(at, 1 + rng() % 8, static_cast<char>(rng() % 256)); break;
      case 3: s.erase(at, 1 + rng() % 16); break;
      case 4: s.resize(at); break;
      default: s += std::string(1 + rng() % 64, static_cast<char>(rng() % 256));
    }
  }
  return s;
}

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base && *base ? base : "/tmp") + "/quartet_fuzz_" + std::to_string(::getpid()) + "_" + name;
    quartet::remove_tree(path);
    quartet::make_directories(path);
  }
  ~TempDir() { quartet::remove_tree(path); }
};

// ---- targets ----------------------------------------------------------------------------------

TEST(Fuzz, SafetensorsHeader) {
  TempDir tmp("safetensors");
  const std::string good = tmp.path + "/good.safetensors";
  quartet::save_safetensors(good, {{"a.weight", torch::randn({4, 3})},
                                            {"b.bias", torch::arange(5, torch::kInt64)},
                                            {"c", torch::ones({2, 2, 2}, torch::kBFloat16)},
                                            {"empty", torch::zeros({0, 3})}},
                            {{"format", "pt"}});
  const std::string bytes = read_file(good);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  const std::string data = bytes.substr(8 + n);
  HangGuard guard;
  Outcomes o;
  for (int i = 0; i < kMutants; ++i) {
    std::mt19937_64 rng(kSeed + static_cast<uint64_t>(i));
    std::string mutant;
    if (i % 3 == 0) {
      mutant = mutate_bytes(bytes, rng);  // anywhere: the length prefix, the header, the data
    } else {
      json h = header;
      mutate_json(h, rng);
      const std::string text = h.dump();
      const uint64_t len = text.size();
      mutant = std::string(reinterpret_cast<const char*>(&len), 8) + text + data;
    }
    const std::string p = tmp.path + "/mutant.safetensors";
    write_file(p, mutant);
    try_case(guard, o, "safetensors mutant " + std::to_string(i) + " (seed " + std::to_string(kSeed + i) + ")", [&] {
      quartet::SafetensorsFile f(p);
      for (const auto& e : f.entries()) {
        f.get(e.name);
        if (!e.shape.empty() && e.shape[0] > 0) f.slice(e.name, 0, 0, 1);
      }
    });
  }
  report("safetensors", o);
  EXPECT_GT(o.refused, kMutants / 2);  // the mutations do reach the checks
}

TEST(Fuzz, ConfigJson) {
  const std::string models = env_dir("QUARTET_PARITY_DIR") + "/models";
  ASSERT_TRUE(quartet::is_directory(models)) << models << ": the models fixture writes it";
  std::vector<std::string> configs;
  for (const auto& d : quartet::list_directory(models))
    if (quartet::is_regular_file(models + "/" + d + "/config.json")) configs.push_back(read_file(models + "/" + d + "/config.json"));
  ASSERT_GE(configs.size(), 10u);
  HangGuard guard;
  Outcomes o;
  for (int i = 0; i < kMutants; ++i) {
    std::mt19937_64 rng(kSeed + 1000 + static_cast<uint64_t>(i));
    const std::string& base = configs[static_cast<size_t>(i) % configs.size()];
    std::string mutant;
    if (i % 4 == 0) {
      mutant = mutate_bytes(base, rng);
    } else {
      json j = json::parse(base);
      for (int k = 0, edits = 1 + static_cast<int>(rng() % 3); k < edits; ++k) mutate_json(j, rng);
      mutant = j.dump();
    }
    try_case(guard, o, "config.json mutant " + std::to_string(i) + ": " + mutant.substr(0, 300), [&] {
      const auto c = quartet::ModelConfig::from_json_text(mutant, "config.json");
      // What a loader does next with the sizes: count the parameters of each head's model.
      for (auto head : {quartet::Head::causal_lm, quartet::Head::token_value, quartet::Head::sequence_reward})
        quartet::unit_parameter_counts(c, head);
    });
  }
  report("config.json", o);
  EXPECT_GT(o.refused, kMutants / 4);
}

TEST(Fuzz, TokenizerJson) {
  const std::string dir = env_dir("QUARTET_PARITY_DIR") + "/tokenizers";
  std::vector<std::string> files;
  if (quartet::is_directory(dir))
    for (const auto& d : quartet::list_directory(dir))
      if (quartet::is_regular_file(dir + "/" + d + "/tokenizer.json")) files.push_back(read_file(dir + "/" + d + "/tokenizer.json"));
  ASSERT_GE(files.size(), 2u) << dir << ": the tokenizers fixture writes it";
  TempDir tmp("tokenizer");
  HangGuard guard;
  Outcomes o;
  const std::string text = "sort 3817= Grüße 数字 <|endoftext|>  \n\t def add(a, b): 🙂";
  for (int i = 0; i < kMutants / 3; ++i) {  // a tokenizer.json is large: fewer, slower cases
    std::mt19937_64 rng(kSeed + 2000 + static_cast<uint64_t>(i));
    const std::string& base = files[static_cast<size_t>(i) % files.size()];
    std::string mutant;
    if (i % 4 == 0) {
      mutant = mutate_bytes(base, rng);
    } else {
      json j = json::parse(base);
      // The interesting parts are small next to the vocabulary: aim there most of the time.
      const char* parts[] = {"pre_tokenizer", "normalizer", "post_processor", "decoder", "added_tokens", "model"};
      const std::string part = parts[rng() % 6];
      if (j.contains(part) && !j[part].is_null() && part != "model") mutate_json(j[part], rng);
      else if (j.contains("model") && rng() % 2) {
        json& m = j["model"];
        const char* keys[] = {"type", "merges", "byte_fallback", "unk_token", "ignore_merges", "dropout"};
        const std::string key = keys[rng() % 6];
        if (m.contains(key) && m[key].is_array() && !m[key].empty() && rng() % 2)
          m[key][rng() % m[key].size()] = nasty_value(rng);
        else
          m[key] = nasty_value(rng);
      } else {
        mutate_json(j, rng);
      }
      mutant = j.dump();
    }
    const std::string p = tmp.path + "/tokenizer.json";
    write_file(p, mutant);
    try_case(guard, o, "tokenizer.json mutant " + std::to_string(i) + " (seed " + std::to_string(kSeed + 2000 + i) + ")",
             [&] {
               auto t = quartet::load_hf_tokenizer(p);
               auto ids = t->encode(text);
               t->decode(ids);
               t->decode(ids, /*skip_special_tokens=*/true);
             });
  }
  report("tokenizer", o);
  EXPECT_GT(o.refused, 0);
}

TEST(Fuzz, Decks) {
  const std::string source = env_dir("QUARTET_SOURCE_DIR");
  std::vector<std::string> decks;
  for (const char* d : {"inputs/demo.deck", "inputs/llama-7b.deck", "inputs/founding.deck", "tests/decks/train_colocated.deck"})
    decks.push_back(read_file(source + "/" + d));
  // Values that a typo or a script can put into a deck.
  const std::vector<std::string> values = {"", "0", "-1", "1e308", "inf", "-inf", "nan", "99999999999999999999",
                                           "2147483648", "0x10", "true", "maybe", "random:", "random:bert", "/",
                                           "1.5", "-0", "1e-320", "auto", "=", "[x]", "k1,k2", "\xff\xfe"};
  HangGuard guard;
  Outcomes o;
  for (int i = 0; i < kMutants; ++i) {
    std::mt19937_64 rng(kSeed + 3000 + static_cast<uint64_t>(i));
    std::string deck = decks[static_cast<size_t>(i) % decks.size()];
    std::vector<std::string> lines;
    std::stringstream in(deck);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (int k = 0, edits = 1 + static_cast<int>(rng() % 3); k < edits && !lines.empty(); ++k) {
      const size_t at = rng() % lines.size();
      std::string& line = lines[at];
      const size_t eq = line.find('=');
      switch (rng() % 5) {
        case 0:
          if (eq != std::string::npos) line = line.substr(0, eq + 1) + " " + values[rng() % values.size()];
          break;
        case 1: lines.erase(lines.begin() + static_cast<long>(at)); break;
        case 2: lines.insert(lines.begin() + static_cast<long>(at), line); break;
        case 3: line = mutate_bytes(line, rng); break;
        default: std::swap(line, lines[rng() % lines.size()]);
      }
    }
    std::string mutant;
    for (const auto& l : lines) mutant += l + "\n";
    try_case(guard, o, "deck mutant " + std::to_string(i) + ":\n" + mutant, [&] {
      quartet::Deck d("mutant.deck", mutant, {}, quartet::deck_schema());
      const quartet::Config c = quartet::load_config(d);
      for (int world : {1, 4, 8}) {
        try {
          quartet::make_placement(c.get<quartet::PlacementConfig>(), world, d);
        } catch (const quartet::DeckError&) {
        }
      }
      for (quartet::Role r : quartet::kAllRoles)
        if (quartet::has_model(c, r)) quartet::resolve_model(c, r);
    });
  }
  report("deck", o);
  EXPECT_GT(o.refused, kMutants / 10);
}

// A checkpoint directory: the manifest mutated as JSON or bytes, or a file of the step damaged
// in place (bytes changed, cut or appended). Every damaged file must be found by verification;
// a mutated manifest must be read or refused by name, and inspect must say what it makes of it.
TEST(Fuzz, CheckpointFiles) {
  const std::string fixture = env_dir("QUARTET_IO_CHECKPOINTS");
  const std::string step = fixture + "/llama/checkpoints/step_3";
  ASSERT_TRUE(quartet::path_exists(step + "/manifest.json")) << step << ": the io_checkpoints fixture writes it";
  ASSERT_TRUE(quartet::verify_checkpoint(step, MPI_COMM_NULL).empty());
  TempDir tmp("checkpoint");
  const std::string copy = tmp.path + "/checkpoints/step_3";
  HangGuard guard;
  Outcomes o;
  int undetected = 0;
  std::vector<std::string> names = quartet::list_directory(step);
  std::sort(names.begin(), names.end());
  for (int i = 0; i < kMutants / 3; ++i) {
    std::mt19937_64 rng(kSeed + 4000 + static_cast<uint64_t>(i));
    quartet::remove_tree(copy);
    copy_directory(step, copy);
    const std::string name = names[rng() % names.size()];
    const std::string target = copy + "/" + name;
    const std::string before = read_file(target);
    if (name == "manifest.json" && rng() % 3) {
      json j = json::parse(before);
      for (int k = 0, edits = 1 + static_cast<int>(rng() % 2); k < edits; ++k) mutate_json(j, rng);
      write_file(target, j.dump());
    } else {
      write_file(target, mutate_bytes(before, rng));
    }
    if (read_file(target) == before) continue;  // the mutation happened to change nothing
    const std::string what = "checkpoint mutant " + std::to_string(i) + " (" + name + ", seed " +
                             std::to_string(kSeed + 4000 + i) + ")";
    std::vector<std::string> problems;
    try_case(guard, o, what, [&] {
      problems = quartet::verify_checkpoint(copy, MPI_COMM_NULL);
      bool intact = false;
      quartet::describe_checkpoint(copy, &intact);
      if (intact != problems.empty()) throw std::logic_error("inspect and verification disagree");
    });
    // A data file changed in place cannot verify: its size or a checksum must differ.
    if (name != "manifest.json" && problems.empty()) {
      ++undetected;
      ADD_FAILURE() << what << ": the damaged " << name << " verifies as intact";
    }
  }
  report("checkpoint", o);
  EXPECT_EQ(undetected, 0);
}

}  // namespace

}  // namespace test_fuzz
