// The checkpoint directory: commit writes a manifest whose sizes and checksums are checked here
// against XXH3 computed independently (one-shot over the bytes in memory), moves `latest`, and
// applies retention; verification names what is wrong (missing manifest, malformed manifest,
// missing, truncated and grown files, corrupt byte ranges), the same list on every rank however
// the chunks were dealt out; find_latest_checkpoint falls back past bad checkpoints with
// warnings; errors on rank 0 reach every rank. Small checksum chunks (detail::commit_checkpoint)
// give files of a few KiB several chunks, so that 3 ranks each check some of them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "quartet/core/files.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_checkpoint_dir {

namespace {

constexpr int64_t kChunk = 4096;

MPI_Comm comm() { return test::world().comm(); }
bool root() { return test::world().rank() == 0; }

// A fresh run directory per test and rank count (the 1- and 3-rank runs may go at once).
std::string fresh_dir(const std::string& name) {
  const char* base = std::getenv("QUARTET_PARITY_DIR");
  const std::string dir =
      std::string(base ? base : "/tmp") + "/checkpoint_dir_" + name + "_np" + std::to_string(test::world().size());
  if (root()) {
    remove_tree(dir);
    make_directories(dir);
  }
  MPI_Barrier(comm());
  return dir;
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

void write_bytes(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  write_all(fd, data.data(), data.size(), path);
  ::close(fd);
}

void flip_byte(const std::string& path, int64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
  c ^= 0x5a;
  ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
  ::close(fd);
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// The checksums a manifest must list for `data`, computed without the library's streaming code.
std::vector<std::string> expected_chunks(const std::string& data, int64_t chunk) {
  std::vector<std::string> out;
  for (size_t off = 0; off < data.size(); off += static_cast<size_t>(chunk))
    out.push_back(hex(XXH3_64bits(data.data() + off, std::min(data.size() - off, static_cast<size_t>(chunk)))));
  return out;
}

std::string link_target(const std::string& link) {
  char buf[256];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  return n < 0 ? "<no link>" : std::string(buf, static_cast<size_t>(n));
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Every rank must have come to rank 0's answer.
void expect_same_everywhere(const std::string& mine) {
  std::string theirs = mine;
  long long n = static_cast<long long>(theirs.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm());
  theirs.resize(static_cast<size_t>(n));
  MPI_Bcast(theirs.data(), static_cast<int>(n), MPI_CHAR, 0, comm());
  EXPECT_EQ(mine, theirs) << "rank " << test::world().rank() << " differs from rank 0";
}

// One checkpoint of iteration `it` with the given files (name -> bytes), written by rank 0,
// committed with small chunks. Returns the files' contents.
std::map<std::string, std::string> write_checkpoint(const std::string& out, int64_t it,
                                                    const std::vector<std::pair<std::string, size_t>>& files,
                                                    int keep = 100, int keep_every = 0) {
  const std::string dir = begin_checkpoint(out, it, comm());
  std::map<std::string, std::string> data;
  std::vector<std::string> names;
  unsigned seed = static_cast<unsigned>(it) * 100;
  for (const auto& [name, bytes] : files) {
    data[name] = random_bytes(bytes, ++seed);
    names.push_back(name);
    if (root()) {
      if (name.find('/') != std::string::npos) make_directories(dir + "/" + name.substr(0, name.rfind('/')));
      write_bytes(dir + "/" + name, data[name]);
    }
  }
  MPI_Barrier(comm());  // the files are closed on rank 0 before anyone commits
  quartet::detail::commit_checkpoint(out, it, names, {{"models", {"actor"}}, {"iteration", it}}, comm(), keep, keep_every,
                            kChunk);
  return data;
}

std::set<int64_t> on_disk(const std::string& out) {
  const auto v = list_checkpoint_steps(out);
  return {v.begin(), v.end()};
}

TEST(CheckpointDir, CommitWritesManifestAndLatestAndVerifies) {
  const std::string out = fresh_dir("commit");
  // 3 chunks with a short last one, none, exactly 2, one in a subdirectory.
  const auto data = write_checkpoint(out, 5, {{"actor.h5", 10000}, {"empty.bin", 0}, {"exact.bin", 2 * kChunk},
                                              {"critic/shard.bin", 100}});
  const std::string dir = step_dir(out, 5);
  EXPECT_EQ(dir, out + "/checkpoints/step_5");

  const auto j = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  EXPECT_EQ(j["format"], "quartet checkpoint");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["iteration"], 5);
  EXPECT_EQ(j["checksum"], "xxh3-64");
  EXPECT_EQ(j["chunk_bytes"], kChunk);
  EXPECT_TRUE(std::regex_match(j["created"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << j["created"];
  EXPECT_EQ(j["info"]["models"][0], "actor");
  ASSERT_EQ(j["files"].size(), 4u);
  const std::vector<std::string> order = {"actor.h5", "empty.bin", "exact.bin", "critic/shard.bin"};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& f = j["files"][i];
    EXPECT_EQ(f["name"], order[i]);
    EXPECT_EQ(f["bytes"], data.at(order[i]).size());
    EXPECT_EQ(f["xxh3"].get<std::vector<std::string>>(), expected_chunks(data.at(order[i]), kChunk)) << order[i];
  }
  EXPECT_EQ(j["files"][0]["xxh3"].size(), 3u);
  EXPECT_EQ(j["files"][1]["xxh3"].size(), 0u);

  const Manifest m = read_manifest(dir);
  EXPECT_EQ(m.iteration, 5);
  EXPECT_EQ(m.chunk_bytes, kChunk);
  ASSERT_EQ(m.files.size(), 4u);
  EXPECT_EQ(hex(m.files[0].chunks[2]), expected_chunks(data.at("actor.h5"), kChunk)[2]);
  EXPECT_EQ(m.info["iteration"], 5);

  EXPECT_EQ(link_target(out + "/checkpoints/latest"), "step_5");
  EXPECT_FALSE(path_exists(out + "/checkpoints/latest.tmp"));
  EXPECT_FALSE(path_exists(dir + "/manifest.json.tmp"));
  const auto problems = verify_checkpoint(dir, comm());
  EXPECT_TRUE(problems.empty()) << joined(problems);
  expect_same_everywhere(joined(problems));
}

TEST(CheckpointDir, PublicCommitUses64MiBChunks) {
  const std::string out = fresh_dir("public");
  const std::string dir = begin_checkpoint(out, 0, comm());
  const std::string data = random_bytes(100000, 7);
  if (root()) write_bytes(dir + "/trainer.h5", data);
  MPI_Barrier(comm());
  commit_checkpoint(out, 0, {"trainer.h5"}, nlohmann::json::object(), comm(), 1, 0);
  const Manifest m = read_manifest(dir);
  EXPECT_EQ(m.chunk_bytes, kChecksumChunkBytes);
  EXPECT_EQ(m.chunk_bytes, 67108864);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].bytes, 100000);
  ASSERT_EQ(m.files[0].chunks.size(), 1u);
  EXPECT_EQ(m.files[0].chunks[0], XXH3_64bits(data.data(), data.size()));
  EXPECT_TRUE(verify_checkpoint(dir, comm()).empty());
}

TEST(CheckpointDir, VerifyNamesTheCorruptByteRange) {
  const std::string out = fresh_dir("corrupt");
  write_checkpoint(out, 3, {{"actor.h5", 6 * kChunk + 100}, {"trainer.h5", 500}});
  const std::string dir = step_dir(out, 3);
  // Chunk 2 of 7: on 3 ranks another rank than 0 reads it, so the combination is what finds it.
  if (root()) flip_byte(dir + "/actor.h5", 2 * kChunk + 17);
  MPI_Barrier(comm());
  auto problems = verify_checkpoint(dir, comm());
  EXPECT_EQ(problems, std::vector<std::string>{"step_3/actor.h5: bytes 8192..12288 do not match their checksum (corrupt)"});
  expect_same_everywhere(joined(problems));

  // Every chunk, the short last one included: three ranges named, the rest counted.
  if (root())
    for (int64_t k : {0, 1, 3, 4, 5}) flip_byte(dir + "/actor.h5", k * kChunk + 1);
  if (root()) flip_byte(dir + "/actor.h5", 6 * kChunk + 99);
  if (root()) flip_byte(dir + "/trainer.h5", 0);
  MPI_Barrier(comm());
  problems = verify_checkpoint(dir, comm());
  EXPECT_EQ(problems, (std::vector<std::string>{
                          "step_3/actor.h5: bytes 0..4096 do not match their checksum (corrupt)",
                          "step_3/actor.h5: bytes 4096..8192 do not match their checksum (corrupt)",
                          "step_3/actor.h5: bytes 8192..12288 do not match their checksum (corrupt)",
                          "step_3/actor.h5: and 4 more chunks do not match their checksum",
                          "step_3/trainer.h5: bytes 0..500 do not match their checksum (corrupt)",
                      }));
  expect_same_everywhere(joined(problems));

  // This process alone, without MPI (what a tool does): the same answer.
  if (root()) {
    EXPECT_EQ(verify_checkpoint(dir, MPI_COMM_NULL), problems);
  }
  MPI_Barrier(comm());
}

TEST(CheckpointDir, VerifyNamesSizesMissingFilesAndIncompleteOrMalformedManifests) {
  const std::string out = fresh_dir("sizes");
  write_checkpoint(out, 40, {{"actor.h5", 3 * kChunk}, {"critic.h5", 1000}, {"trainer.h5", 10}});
  const std::string dir = step_dir(out, 40);
  if (root()) {
    // EXPECT, not ASSERT, where only rank 0 runs: an early return would leave the others waiting.
    EXPECT_EQ(::truncate((dir + "/actor.h5").c_str(), 5000), 0);
    EXPECT_EQ(::truncate((dir + "/critic.h5").c_str(), 1001), 0);
    EXPECT_EQ(::unlink((dir + "/trainer.h5").c_str()), 0);
  }
  MPI_Barrier(comm());
  auto problems = verify_checkpoint(dir, comm());
  EXPECT_EQ(problems, (std::vector<std::string>{
                          "step_40/actor.h5: 5000 bytes, the manifest says 12288 (truncated)",
                          "step_40/critic.h5: 1001 bytes, the manifest says 1000 (grown)",
                          "step_40/trainer.h5: missing (the manifest lists 10 bytes)",
                      }));
  expect_same_everywhere(joined(problems));

  // Malformed manifests: broken JSON, a field of the wrong type, a newer version, a directory
  // that does not match the iteration. Each names manifest.json and the field.
  const std::string manifest = dir + "/manifest.json";
  const std::string good = root() ? read_file(manifest) : "";
  auto with = [&](const std::string& text) {
    if (root()) write_text_atomically(manifest, text);
    MPI_Barrier(comm());
    auto p = verify_checkpoint(dir, comm());
    expect_same_everywhere(joined(p));
    std::string read_error = test::error_of([&] { read_manifest(dir); });
    MPI_Barrier(comm());
    return std::make_pair(joined(p), read_error);
  };
  auto [p1, e1] = with("{\"format\": \"quartet checkpoint\", ");
  EXPECT_EQ(p1.rfind("step_40/manifest.json: malformed: not valid JSON", 0), 0u) << p1;
  EXPECT_NE(e1.find(manifest + ": malformed: not valid JSON"), std::string::npos) << e1;

  auto edit = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = root() ? nlohmann::json::parse(good) : nlohmann::json();
    if (root()) f(j);
    return with(root() ? j.dump(2) : "");
  };
  auto [p2, e2] = edit([](nlohmann::json& j) { j["files"][1]["bytes"] = "1000"; });
  EXPECT_EQ(p2, "step_40/manifest.json: malformed: files[1].bytes: expected a non-negative integer, found \"1000\"\n");
  EXPECT_NE(e2.find(manifest + ": malformed: files[1].bytes"), std::string::npos) << e2;
  auto [p3, e3] = edit([](nlohmann::json& j) { j["version"] = 2; });
  EXPECT_EQ(p3, "step_40/manifest.json: malformed: version: this build reads version 1, found 2\n");
  auto [p4, e4] = edit([](nlohmann::json& j) { j["files"][0]["xxh3"].erase(0); });
  EXPECT_EQ(p4, "step_40/manifest.json: malformed: files[0].xxh3: 2 checksums, but 12288 bytes in chunks of 4096 make 3\n");
  auto [p5, e5] = edit([](nlohmann::json& j) { j["files"][2]["name"] = "../escape.h5"; });
  EXPECT_NE(p5.find("files[2].name: \"../escape.h5\""), std::string::npos) << p5;
  auto [p6, e6] = edit([](nlohmann::json& j) { j.erase("chunk_bytes"); });
  EXPECT_EQ(p6, "step_40/manifest.json: malformed: chunk_bytes: missing\n");
  auto [p7, e7] = edit([](nlohmann::json& j) { j["iteration"] = 41; });
  EXPECT_EQ(p7.rfind("step_40/manifest.json: says iteration 41, but the directory is step_40\n", 0), 0u) << p7;
  EXPECT_EQ(e7, "<no error>");  // a well-formed manifest reads, whatever directory it is in

  // No manifest at all: the write did not finish.
  if (root()) {
    EXPECT_EQ(::unlink(manifest.c_str()), 0);
  }
  MPI_Barrier(comm());
  problems = verify_checkpoint(dir, comm());
  EXPECT_EQ(problems, std::vector<std::string>{"step_40: no manifest.json (the write did not finish)"});
  EXPECT_NE(test::error_of([&] { read_manifest(dir); }).find(manifest + ": no such file"), std::string::npos);
  MPI_Barrier(comm());
}

TEST(CheckpointDir, TheManifestFixesTheSetOfFiles) {
  const std::string out = fresh_dir("file_set");
  write_checkpoint(out, 8, {{"actor.h5", 3 * kChunk}, {"trainer.h5", 10}});
  const std::string dir = step_dir(out, 8);
  // The reader's files must be listed: critic.h5 is not.
  CheckpointNeeds needs;
  needs.reader = "the test reader";
  needs.files = {"trainer.h5", "critic.h5"};
  auto problems = verify_checkpoint(dir, comm(), needs);
  EXPECT_EQ(problems, std::vector<std::string>{"step_8/manifest.json: lists no critic.h5, which the test reader needs"});
  expect_same_everywhere(joined(problems));
  // A file the manifest does not list (here under a subdirectory, too) is vouched for by nothing.
  if (root()) {
    write_bytes(dir + "/extra.h5", "garbage");
    make_directories(dir + "/sub");
    write_bytes(dir + "/sub/more.bin", "more");
  }
  MPI_Barrier(comm());
  problems = verify_checkpoint(dir, comm());
  EXPECT_EQ(problems, (std::vector<std::string>{"step_8/extra.h5: in the directory, but not in the manifest",
                                                "step_8/sub/more.bin: in the directory, but not in the manifest"}));
  expect_same_everywhere(joined(problems));
  // The consistency check runs once the files are intact, on rank 0, and reaches every rank.
  if (root()) {
    remove_tree(dir + "/extra.h5");
    remove_tree(dir + "/sub");
  }
  MPI_Barrier(comm());
  CheckpointNeeds consistent;
  consistent.consistent = [](const std::string&, const Manifest& m) {
    return std::vector<std::string>{"actor.h5: holds iteration 4, the manifest step " + std::to_string(m.iteration)};
  };
  problems = verify_checkpoint(dir, comm(), consistent);
  EXPECT_EQ(problems, std::vector<std::string>{"step_8/actor.h5: holds iteration 4, the manifest step 8"});
  expect_same_everywhere(joined(problems));
  std::vector<std::string> warnings;
  EXPECT_FALSE(find_latest_checkpoint(out, comm(), &warnings, consistent).has_value());
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("checkpoint step_8 skipped: step_8/actor.h5: holds iteration 4"), std::string::npos)
      << warnings[0];
  EXPECT_TRUE(verify_checkpoint(dir, comm()).empty());
  MPI_Barrier(comm());
}

TEST(CheckpointDir, FindLatestFallsBackPastBadCheckpointsWithWarnings) {
  const std::string out = fresh_dir("find");
  std::vector<std::string> warnings;
  EXPECT_FALSE(find_latest_checkpoint(out, comm(), &warnings));  // a fresh run: no checkpoints/ yet
  EXPECT_TRUE(warnings.empty());

  for (int64_t it : {10, 20, 30}) write_checkpoint(out, it, {{"actor.h5", 2 * kChunk + 5}, {"trainer.h5", 64}});
  // 30 is corrupt and `latest` names it; 40 was begun but never committed.
  if (root()) flip_byte(step_dir(out, 30) + "/actor.h5", kChunk + 3);
  const std::string d40 = begin_checkpoint(out, 40, comm());
  if (root()) {
    write_bytes(d40 + "/actor.h5", "half");
    // Names that are not checkpoints are ignored.
    make_directories(out + "/checkpoints/step_007");
    make_directories(out + "/checkpoints/step_x");
    write_bytes(out + "/checkpoints/latest.tmp", "");
  }
  MPI_Barrier(comm());
  EXPECT_EQ(list_checkpoint_steps(out), (std::vector<int64_t>{10, 20, 30, 40}));

  // EXPECT, not ASSERT, below: a rank returning early would leave the others waiting.
  const auto found = find_latest_checkpoint(out, comm(), &warnings);
  EXPECT_TRUE(found);
  EXPECT_EQ(found ? found->dir : "<none>", step_dir(out, 20));
  EXPECT_EQ(found ? found->manifest.iteration : -1, 20);
  EXPECT_EQ(found ? found->manifest.info["iteration"] : nlohmann::json(), 20);
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "checkpoint step_40 skipped: step_40: no manifest.json (the write did not finish)",
                          "checkpoint step_30 skipped: step_30/actor.h5: bytes 4096..8192 do not match their "
                          "checksum (corrupt)",
                          "checkpoints/latest names step_30, which was skipped (see above); using step_20",
                      }));
  expect_same_everywhere(joined(warnings) + (found ? found->dir : "<none>"));

  // `latest` behind the newest good one (a crash between manifest and link) is no news.
  if (root()) {
    remove_tree(d40);
    remove_tree(step_dir(out, 30));
  }
  MPI_Barrier(comm());
  warnings.clear();
  const auto again = find_latest_checkpoint(out, comm(), &warnings);
  EXPECT_EQ(again ? again->dir : "<none>", step_dir(out, 20));
  EXPECT_EQ(warnings, std::vector<std::string>{
                          "checkpoints/latest names step_30, which is not a checkpoint directory; using step_20"});
  if (root()) {
    ::unlink((out + "/checkpoints/latest").c_str());
    EXPECT_EQ(::symlink("step_10", (out + "/checkpoints/latest").c_str()), 0);
  }
  MPI_Barrier(comm());
  warnings.clear();
  const auto third = find_latest_checkpoint(out, comm(), &warnings);
  EXPECT_EQ(third ? third->dir : "<none>", step_dir(out, 20));
  EXPECT_TRUE(warnings.empty()) << joined(warnings);
}

TEST(CheckpointDir, RetentionKeepsTheNewestAndTheMultiples) {
  const std::string out = fresh_dir("retention");
  const int keep = 2, keep_every = 4;
  for (int64_t it = 1; it <= 9; ++it) {
    write_checkpoint(out, it, {{"actor.h5", 100}}, keep, keep_every);
    // The rule, straight from the header: the last `keep` up to it, and the multiples of keep_every.
    std::set<int64_t> want;
    for (int64_t s = 1; s <= it; ++s)
      if (s > it - keep || s % keep_every == 0) want.insert(s);
    EXPECT_EQ(on_disk(out), want) << "after committing " << it;
    EXPECT_EQ(link_target(out + "/checkpoints/latest"), "step_" + std::to_string(it));
    MPI_Barrier(comm());  // before rank 0 begins the next one
  }
  EXPECT_EQ(on_disk(out), (std::set<int64_t>{4, 8, 9}));
  for (int64_t s : {4, 8, 9}) EXPECT_TRUE(verify_checkpoint(step_dir(out, s), comm()).empty()) << s;
}

TEST(CheckpointDir, RetentionRemovesIncompleteDirectoriesAndLeavesNewerCompleteOnes) {
  const std::string out = fresh_dir("debris");
  // A complete step_50 from an earlier run that got further, then this run, resumed at 1.
  write_checkpoint(out, 50, {{"actor.h5", 10}});
  write_checkpoint(out, 1, {{"actor.h5", 10}}, 1, 0);
  EXPECT_EQ(on_disk(out), (std::set<int64_t>{1, 50}));
  MPI_Barrier(comm());
  // Debris: an unfinished step_2 of a crashed write and an unfinished step_60 beyond the commit.
  for (int64_t it : {2, 60}) {
    const std::string d = begin_checkpoint(out, it, comm());
    if (root()) write_bytes(d + "/actor.h5", "partial");
  }
  MPI_Barrier(comm());
  write_checkpoint(out, 3, {{"actor.h5", 10}}, 1, 0);
  EXPECT_EQ(on_disk(out), (std::set<int64_t>{3, 50}));
  EXPECT_EQ(link_target(out + "/checkpoints/latest"), "step_3");
}

TEST(CheckpointDir, BeginCheckpointClearsAnEarlierAttemptAndTheLinkToIt) {
  const std::string out = fresh_dir("begin");
  write_checkpoint(out, 7, {{"actor.h5", 100}, {"old.h5", 100}});
  const std::string latest = out + "/checkpoints/latest";
  ASSERT_EQ(link_target(latest), "step_7");

  // Another step leaves `latest` alone.
  begin_checkpoint(out, 8, comm());
  EXPECT_EQ(link_target(latest), "step_7");
  if (root()) write_bytes(step_dir(out, 8) + "/stale.h5", "x");
  MPI_Barrier(comm());
  EXPECT_EQ(begin_checkpoint(out, 8, comm()), step_dir(out, 8));
  EXPECT_TRUE(list_directory(step_dir(out, 8)).empty());

  // Writing 7 again: its old files go, and `latest` no longer names it.
  EXPECT_EQ(begin_checkpoint(out, 7, comm()), step_dir(out, 7));
  EXPECT_TRUE(is_directory(step_dir(out, 7)));
  EXPECT_TRUE(list_directory(step_dir(out, 7)).empty());
  struct stat st {};
  EXPECT_NE(::lstat(latest.c_str(), &st), 0) << "latest still names the directory being rewritten";
  MPI_Barrier(comm());
  write_checkpoint(out, 7, {{"actor.h5", 50}});
  EXPECT_EQ(link_target(latest), "step_7");
  EXPECT_EQ(read_manifest(step_dir(out, 7)).files.size(), 1u);
}

TEST(CheckpointDir, ErrorsOnRankZeroReachEveryRank) {
  const std::string out = fresh_dir("errors");
  const std::string dir = begin_checkpoint(out, 2, comm());
  if (root()) write_bytes(dir + "/actor.h5", "abc");
  MPI_Barrier(comm());
  // A listed file that is not there: only rank 0 looks, every rank throws the same message.
  const std::string e = test::error_of(
      [&] { commit_checkpoint(out, 2, {"actor.h5", "critic.h5"}, {}, comm(), 2, 0); });
  EXPECT_NE(e.find("cannot commit checkpoint: " + dir + "/critic.h5: No such file or directory"), std::string::npos)
      << e;
  expect_same_everywhere(e);
  EXPECT_FALSE(path_exists(dir + "/manifest.json"));
  EXPECT_FALSE(path_exists(out + "/checkpoints/latest"));

  // No begin_checkpoint: no directory.
  const std::string e2 = test::error_of([&] { commit_checkpoint(out, 3, {"actor.h5"}, {}, comm(), 2, 0); });
  EXPECT_NE(e2.find(step_dir(out, 3) + ": no such directory"), std::string::npos) << e2;
  expect_same_everywhere(e2);

  // Bad arguments fail on every rank before anything is written.
  EXPECT_NE(test::error_of([&] { commit_checkpoint(out, 2, {"actor.h5"}, {}, comm(), 0, 0); })
                .find("keep = 0, must be at least 1"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { commit_checkpoint(out, 2, {"../actor.h5"}, {}, comm(), 1, 0); })
                .find("file name \"../actor.h5\""),
            std::string::npos);
  EXPECT_FALSE(path_exists(dir + "/manifest.json"));

  // The directory is still usable: the same commit with the right list succeeds.
  commit_checkpoint(out, 2, {"actor.h5"}, {}, comm(), 2, 0);
  EXPECT_TRUE(verify_checkpoint(dir, comm()).empty());
}

// Not run by ctest: checksum throughput over a 1 GiB file in the page cache. Run by hand:
//   mpirun -np N test_checkpoint_dir --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
TEST(CheckpointDir, DISABLED_ChecksumThroughput) {
  const std::string out = fresh_dir("throughput");
  const std::string dir = begin_checkpoint(out, 1, comm());
  const int64_t bytes = 1ll << 30;
  if (root()) {
    const std::string block = random_bytes(16 << 20, 1);
    const int fd = ::open((dir + "/big.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int64_t off = 0; off < bytes; off += static_cast<int64_t>(block.size()))
      write_all(fd, block.data(), block.size(), "big.bin");
    ::close(fd);
  }
  MPI_Barrier(comm());
  commit_checkpoint(out, 1, {"big.bin"}, {}, comm(), 1, 0);  // also warms the page cache everywhere
  for (int round = 0; round < 3; ++round) {
    MPI_Barrier(comm());
    const auto t0 = std::chrono::steady_clock::now();
    const auto problems = verify_checkpoint(dir, comm());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(problems.empty());
    if (root())
      std::printf("verify 1 GiB on %d rank(s): %.3f s, %.2f GB/s\n", test::world().size(), s,
                  static_cast<double>(bytes) / s / 1e9);
  }
  if (root()) remove_tree(out);
}

}  // namespace

}  // namespace test_checkpoint_dir
