// safetensors: bit-exact round trips of every dtype, slices against torch's narrow, sharded
// checkpoints, byte-for-byte agreement with the Python `safetensors` package (when
// QUARTET_PYTHON is set), and each refusal's exact message naming the file and the tensor.
#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/model/safetensors.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_safetensors {

namespace {

using test::error_of;

// Error messages start with "rank R (host H), file:line: "; the rest is what we compare.
std::string tail_of(const std::string& msg, const std::string& expected) {
  return msg.size() >= expected.size() ? msg.substr(msg.size() - expected.size()) : msg;
}
#define EXPECT_ERROR_ENDS(call, expected)                                \
  do {                                                                   \
    const std::string want_ = (expected);                                \
    const std::string got_ = error_of([&] { call; });                    \
    EXPECT_EQ(tail_of(got_, want_), want_) << "whole message: " << got_; \
  } while (0)

// POSIX, not std::filesystem: libtorch.so exports its own std::filesystem free functions, and
// its remove_all crashes when bound in place of libstdc++'s.
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

// A file with the given JSON header (length prefixed, unpadded) and data section.
void write_raw(const std::string& p, const std::string& header, const std::string& data) {
  std::uint64_t n = header.size();
  write_bytes(p, std::string(reinterpret_cast<const char*>(&n), 8) + header + data);
}

// Same dtype, same shape, same bytes: NaN payloads and -0.0 included.
::testing::AssertionResult bit_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type())
    return ::testing::AssertionFailure()
           << "dtype " << a.scalar_type() << " vs " << b.scalar_type();
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "shape " << a.sizes() << " vs " << b.sizes();
  torch::Tensor x = a.contiguous(), y = b.contiguous();
  if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ:\n" << a << "\nvs\n" << b;
  return ::testing::AssertionSuccess();
}

// One tensor of every supported dtype, with awkward values (NaN, inf, -0, extremes), plus a 0-d
// scalar, an empty tensor and a non-contiguous view.
NamedTensors all_dtypes() {
  auto f = torch::tensor(
               {1.5, -0.0, std::numeric_limits<double>::infinity(), std::nan(""), 1e-300, -3.25},
               torch::kFloat64)
               .reshape({2, 3});
  NamedTensors t;
  t.emplace_back("f64", f);
  t.emplace_back("f32", torch::randn({3, 4}, torch::kFloat32));
  t.emplace_back("f16", torch::randn({5}, torch::kFloat32).to(torch::kFloat16));
  t.emplace_back("bf16", torch::randn({2, 2, 3}, torch::kFloat32).to(torch::kBFloat16));
  t.emplace_back("i64", torch::tensor({std::numeric_limits<int64_t>::min(), int64_t(-1),
                                       std::numeric_limits<int64_t>::max()}));
  t.emplace_back("i32", torch::randint(-1000000, 1000000, {4, 1}, torch::kInt32));
  t.emplace_back("i16", torch::randint(-30000, 30000, {7}, torch::kInt16));
  t.emplace_back("i8", torch::randint(-128, 128, {3, 3}, torch::kInt8));
  t.emplace_back("u8", torch::randint(0, 256, {9}, torch::kUInt8));
  t.emplace_back("bool", torch::tensor({true, false, false, true, true}).reshape({5, 1}));
  t.emplace_back("f8e4m3", torch::randn({6}).to(torch::kFloat8_e4m3fn));
  t.emplace_back("f8e5m2", torch::randn({6}).to(torch::kFloat8_e5m2));
  t.emplace_back("scalar", torch::tensor(2.75, torch::kFloat32).reshape({}));
  t.emplace_back("empty", torch::empty({0, 3}, torch::kFloat32));
  t.emplace_back("transposed", torch::arange(12, torch::kInt64).reshape({3, 4}).t());
  return t;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    base_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/quartet_st_" + std::to_string(::getpid());
    dir_ = base_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    remove_tree(dir_);
    ::mkdir(base_.c_str(), 0755);
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_;
  }
  void TearDown() override {
    remove_tree(dir_);
    ::rmdir(base_.c_str());  // only once empty
  }
  std::string at(const std::string& name) const { return dir_ + "/" + name; }
  std::string base_, dir_;
};

// ---------------------------------------------------------------------------------------------

TEST_F(Safetensors, RoundTripsEveryDtypeBitExactly) {
  const NamedTensors in = all_dtypes();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcødé \"q\""}};
  save_safetensors(at("a.safetensors"), in, meta);
  EXPECT_FALSE(exists(at("a.safetensors.tmp")));

  SafetensorsFile f(at("a.safetensors"));
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.entries().size(), in.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto& [name, t] = in[i];
    SCOPED_TRACE(name);
    // Data lies in the order given, back to back.
    EXPECT_EQ(f.entries()[i].name, name);
    EXPECT_EQ(f.entries()[i].begin, offset);
    offset += t.nbytes();
    EXPECT_EQ(f.entries()[i].end, offset);
    EXPECT_TRUE(f.has(name));
    torch::Tensor got = f.get(name);
    EXPECT_TRUE(bit_equal(got, t));
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_EQ(f.entry(name).shape, t.sizes().vec());
  }
  EXPECT_EQ(f.get("scalar").dim(), 0);
  EXPECT_EQ(f.get("empty").numel(), 0);

  // HF's layout: header padded with spaces to a multiple of 8, data right after it.
  const std::string bytes = read_bytes(at("a.safetensors"));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + offset);
  EXPECT_EQ(bytes.substr(8, 16), "{\"__metadata__\":");
}

TEST_F(Safetensors, NoMetadataKeyWhenThereIsNone) {
  save_safetensors(at("a.safetensors"), {{"x", torch::ones({2})}});
  const std::string bytes = read_bytes(at("a.safetensors"));
  const std::string h = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(h.size(), 54u);  // padded with 2 spaces to 56
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x38\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes.substr(8, 56), h + "  ");
  EXPECT_EQ(bytes.size(), 8u + 56u + 8u);
  EXPECT_TRUE(SafetensorsFile(at("a.safetensors")).metadata().empty());
}

TEST_F(Safetensors, SlicesEqualTorchNarrow) {
  torch::Tensor a = torch::arange(6 * 5 * 4, torch::kFloat32).reshape({6, 5, 4});
  torch::Tensor b = torch::randn({7, 3}).to(torch::kBFloat16);
  save_safetensors(at("s.safetensors"), {{"a", a}, {"b", b}});
  SafetensorsFile f(at("s.safetensors"));
  for (int64_t dim = 0; dim < 3; ++dim)
    for (int64_t start = 0; start <= a.size(dim); ++start)
      for (int64_t len = 0; start + len <= a.size(dim); ++len) {
        SCOPED_TRACE("a dim " + std::to_string(dim) + " [" + std::to_string(start) + "+" +
                     std::to_string(len) + ")");
        EXPECT_TRUE(bit_equal(f.slice("a", dim, start, len), a.narrow(dim, start, len)));
      }
  EXPECT_TRUE(bit_equal(f.slice("b", 0, 2, 4), b.narrow(0, 2, 4)));
  EXPECT_TRUE(bit_equal(f.slice("b", 1, 1, 2), b.narrow(1, 1, 2)));

  const std::string p = at("s.safetensors");
  EXPECT_ERROR_ENDS(f.slice("a", 3, 0, 1),
                    p + ": tensor 'a' [6, 5, 4] has no dimension 3 to slice along");
  EXPECT_ERROR_ENDS(f.slice("a", -1, 0, 1),
                    p + ": tensor 'a' [6, 5, 4] has no dimension -1 to slice along");
  EXPECT_ERROR_ENDS(f.slice("a", 1, 3, 3),
                    p + ": tensor 'a' [6, 5, 4]: slice [3, 6) of dimension 1 is outside [0, 5)");
  EXPECT_ERROR_ENDS(f.slice("a", 0, -1, 2),
                    p + ": tensor 'a' [6, 5, 4]: slice [-1, 1) of dimension 0 is outside [0, 6)");
  EXPECT_ERROR_ENDS(f.slice("nope", 0, 0, 1), "no tensor 'nope' in " + p);
}

TEST_F(Safetensors, ShardedCheckpointSplitsLikeHuggingFace) {
  // Bytes: 400, 400, 400, 1000, 100 under a 900-byte limit: [a b] [c] [d, alone: too big] [e].
  NamedTensors in = {{"a", torch::randn({100})},
                     {"b", torch::randn({10, 10})},
                     {"c", torch::randint(0, 9, {50}, torch::kInt64)},
                     {"d", torch::randn({250})},
                     {"e", torch::randn({5, 10}).to(torch::kBFloat16)}};
  const std::string ckpt = at("ckpt");  // not there yet: created
  save_safetensors_checkpoint(ckpt, in, 900);

  auto shard = [](int k) { return "model-0000" + std::to_string(k) + "-of-00004.safetensors"; };
  EXPECT_FALSE(exists(ckpt + "/model.safetensors"));
  const auto index = nlohmann::json::parse(read_bytes(ckpt + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), 400u + 400 + 400 + 1000 + 100);
  const nlohmann::json want_map = {
      {"a", shard(1)}, {"b", shard(1)}, {"c", shard(2)}, {"d", shard(3)}, {"e", shard(4)}};
  EXPECT_EQ(index["weight_map"], want_map);
  const std::vector<std::vector<std::string>> held = {{"a", "b"}, {"c"}, {"d"}, {"e"}};
  for (int k = 1; k <= 4; ++k) {
    SafetensorsFile f(ckpt + "/" + shard(k));
    std::vector<std::string> names;
    for (const auto& e : f.entries()) names.push_back(e.name);
    EXPECT_EQ(names, held[k - 1]) << shard(k);
    EXPECT_EQ(f.metadata().at("format"), "pt");
  }

  SafetensorsCheckpoint c(ckpt);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(c.dir(), ckpt);
  for (const auto& [name, t] : in) {
    EXPECT_TRUE(c.has(name));
    EXPECT_TRUE(bit_equal(c.get(name), t)) << name;
    EXPECT_EQ(c.entry(name).shape, t.sizes().vec());
  }
  EXPECT_TRUE(bit_equal(c.slice("b", 1, 3, 4), in[1].second.narrow(1, 3, 4)));
  EXPECT_FALSE(c.has("z"));
  EXPECT_ERROR_ENDS(c.get("z"), "no tensor 'z' in " + ckpt);

  // Saving again, small enough for one file, leaves no stale index or shard to confuse readers.
  save_safetensors_checkpoint(ckpt, {in[0]}, 400);
  EXPECT_EQ(list_dir(ckpt), std::vector<std::string>{"model.safetensors"});
  SafetensorsCheckpoint one(ckpt);
  EXPECT_EQ(one.names(), std::vector<std::string>{"a"});
  EXPECT_TRUE(bit_equal(one.get("a"), in[0].second));
}

// ---------------------------------------------------------------------------------------------
// Interop with the Python package, byte for byte

class SafetensorsPython : public Safetensors {
 protected:
  // Runs `script` with the project's Python, arguments appended; returns its stdout.
  std::string python(const std::string& script, const std::string& args) {
    const char* py = std::getenv("QUARTET_PYTHON");
    if (!py || !*py) return "";
    write_bytes(dir_ + "/script.py", script);
    const std::string cmd =
        std::string("\"") + py + "\" \"" + (dir_ + "/script.py") + "\" " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return "popen failed";
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    ::pclose(p);
    return out;
  }
  void SetUp() override {
    const char* py = std::getenv("QUARTET_PYTHON");
    if (!py || !*py)
      GTEST_SKIP() << "QUARTET_PYTHON is not set: no Python to check interop with safetensors";
    Safetensors::SetUp();
  }
};

// Python and C++ build the same tensors from integers, exact in every dtype used.
const char* kPyValues = R"(
import sys, torch
from safetensors.torch import save_file, load_file
from safetensors import safe_open
def values():
    r = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 0.5 - 3
    return {"f64": r, "f32": r.float(), "f16": r.half(), "bf16": r.bfloat16(),
            "i64": (torch.arange(5) - 2) * (2**40),
            "i32": torch.arange(6, dtype=torch.int32).reshape(3, 2) * -7,
            "i16": torch.arange(4, dtype=torch.int16) * 1000,
            "i8": torch.arange(-3, 3, dtype=torch.int8),
            "u8": torch.arange(250, 256, dtype=torch.uint8), "bool": torch.arange(6) % 3 == 0,
            "f8e4m3": (torch.arange(-8, 8) * 0.25).to(torch.float8_e4m3fn),
            "f8e5m2": (torch.arange(-8, 8) * 0.25).to(torch.float8_e5m2),
            "scalar": torch.tensor(1.25), "empty": torch.zeros(0, 3)}
)";

NamedTensors cpp_values() {
  torch::Tensor r = torch::arange(24, torch::kFloat64).reshape({2, 3, 4}) * 0.5 - 3;
  return {{"f64", r},
          {"f32", r.to(torch::kFloat32)},
          {"f16", r.to(torch::kFloat16)},
          {"bf16", r.to(torch::kBFloat16)},
          {"i64", (torch::arange(5) - 2) * (int64_t(1) << 40)},
          {"i32", torch::arange(6, torch::kInt32).reshape({3, 2}) * -7},
          {"i16", torch::arange(4, torch::kInt16) * 1000},
          {"i8", torch::arange(-3, 3, torch::kInt8)},
          {"u8", torch::arange(250, 256, torch::kUInt8)},
          {"bool", torch::arange(6) % 3 == 0},
          {"f8e4m3", (torch::arange(-8, 8) * 0.25).to(torch::kFloat8_e4m3fn)},
          {"f8e5m2", (torch::arange(-8, 8) * 0.25).to(torch::kFloat8_e5m2)},
          {"scalar", torch::tensor(1.25, torch::kFloat32).reshape({})},
          {"empty", torch::zeros({0, 3})}};
}

TEST_F(SafetensorsPython, ReadsWhatPythonWritesAndWritesTheSameBytes) {
  const std::string py = at("py.safetensors");
  const std::string out = python(std::string(kPyValues) + R"(
save_file(values(), sys.argv[1], metadata={"format": "pt"})
print("written")
)",
                                 "\"" + py + "\"");
  ASSERT_EQ(out, "written\n");

  SafetensorsFile f(py);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  NamedTensors want = cpp_values();
  ASSERT_EQ(f.entries().size(), want.size());
  for (const auto& [name, t] : want) EXPECT_TRUE(bit_equal(f.get(name), t)) << name;

  // Written in Python's order (its entries sorted by offset), ours is the very same file.
  NamedTensors same_order;
  for (const auto& e : f.entries()) same_order.emplace_back(e.name, f.get(e.name));
  save_safetensors(at("cpp.safetensors"), same_order, {{"format", "pt"}});
  const std::string a = read_bytes(py), b = read_bytes(at("cpp.safetensors"));
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "python header: " << a.substr(8, 400) << "\nours: " << b.substr(8, 400);
}

TEST_F(SafetensorsPython, PythonReadsWhatWeWrite) {
  NamedTensors v = cpp_values();
  save_safetensors(at("cpp.safetensors"), v, {{"format", "pt"}, {"step", "42"}});
  save_safetensors_checkpoint(at("ckpt"), v, 200);  // several shards and an index
  const std::string out = python(std::string(kPyValues) + R"(
import json, os
def same(a, b):
    bytes_of = lambda t: t.reshape(-1).view(torch.uint8)
    return a.dtype == b.dtype and a.shape == b.shape and bytes_of(a).equal(bytes_of(b))
want = values()
got = load_file(sys.argv[1])
bad = [k for k in want if k not in got or not same(got[k], want[k])]
bad += [k for k in got if k not in want]
with safe_open(sys.argv[1], framework="pt") as f:
    if f.metadata() != {"format": "pt", "step": "42"}: bad.append("metadata %r" % f.metadata())
index = json.load(open(os.path.join(sys.argv[2], "model.safetensors.index.json")))
merged = {}
for shard in sorted(set(index["weight_map"].values())):
    merged.update(load_file(os.path.join(sys.argv[2], shard)))
if set(merged) != set(want) or any(not same(merged[k], want[k]) for k in want):
    bad.append("shards")
if index["metadata"]["total_size"] != sum(t.nbytes for t in want.values()):
    bad.append("total_size")
if len(set(index["weight_map"].values())) < 2: bad.append("not sharded")
print("ok" if not bad else "mismatch: " + ", ".join(bad))
)",
                                 "\"" + at("cpp.safetensors") + "\" \"" + at("ckpt") + "\"");
  EXPECT_EQ(out, "ok\n");
}

// ---------------------------------------------------------------------------------------------
// Refusals

TEST_F(Safetensors, RefusesTruncatedFiles) {
  const std::string p = at("t.safetensors");
  save_safetensors(p, {{"a", torch::ones({2})}, {"w", torch::ones({2, 3})}});
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(read_bytes(p).size() - 4)), 0);
  EXPECT_ERROR_ENDS(
      SafetensorsFile{p},
      p + ": tensor 'w' needs bytes [8, 32) of the data section but the file holds only 28");
  write_bytes(p, "abc");
  EXPECT_ERROR_ENDS(SafetensorsFile{p},
                    p + ": the file is 3 bytes, too short for the 8-byte header length");
}

TEST_F(Safetensors, RefusesHeaderLengthBeyondTheFile) {
  const std::string p = at("h.safetensors");
  std::uint64_t n = 1000;
  write_bytes(p, std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": header length 1000 goes beyond the file (10 bytes)");
  n = 200ull << 20;
  write_bytes(p, std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": header length 209715200 is over the 100 MiB limit");
}

TEST_F(Safetensors, RefusesCorruptJson) {
  const std::string p = at("j.safetensors");
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", "abcd");
  const std::string e = error_of([&] { SafetensorsFile f(p); });
  const std::string want =
      p + ": corrupt JSON header: [json.exception.parse_error.101] parse error";
  EXPECT_NE(e.find(want), std::string::npos) << e;
  write_raw(p, "[1, 2]", "");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": the JSON header is not an object");
}

TEST_F(Safetensors, RefusesUnknownDtypes) {
  const std::string p = at("d.safetensors");
  write_raw(p, R"({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", "abcdefgh");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": tensor 'w' has unsupported dtype 'C64'");
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": tensor 'w' lacks dtype, shape or data_offsets");
}

TEST_F(Safetensors, RefusesShapeByteSizeMismatch) {
  const std::string p = at("m.safetensors");
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
            std::string(20, 'x'));
  EXPECT_ERROR_ENDS(SafetensorsFile{p},
                    p + ": tensor 'w': shape mismatch: [2, 3] of F32 needs 24 bytes but "
                        "data_offsets [0, 20) hold 20");
  // A product that wraps around 2^64 must not pass for a small one.
  write_raw(p,
            R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
            "");
  EXPECT_ERROR_ENDS(SafetensorsFile{p},
                    p + ": tensor 'w': shape mismatch: [4294967296, 4294967296] of U8 needs over "
                        "2^64 bytes but data_offsets [0, 0) hold 0");
  write_raw(p, R"({"w": {"dtype": "U8", "shape": [2, -1], "data_offsets": [0, 0]}})", "");
  EXPECT_ERROR_ENDS(SafetensorsFile{p},
                    p + ": tensor 'w': shape [2,-1] is not a list of non-negative integers");
  write_raw(p, R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}})", "ab");
  EXPECT_ERROR_ENDS(SafetensorsFile{p},
                    p + ": tensor 'w': data_offsets [2,0] is not [begin, end] with begin <= end");
}

TEST_F(Safetensors, RefusesOverlappingTensors) {
  const std::string p = at("o.safetensors");
  write_raw(p,
            R"({"b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
                "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
            std::string(24, 'x'));
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": tensors 'a' [0, 16) and 'b' [8, 24) overlap");
  // An empty tensor inside another's range holds no bytes and so overlaps nothing.
  write_raw(p,
            R"({"e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
            std::string(16, 'x'));
  EXPECT_EQ(SafetensorsFile(p).entries().size(), 2u);
}

TEST_F(Safetensors, RefusesBadMetadata) {
  const std::string p = at("md.safetensors");
  write_raw(p, R"({"__metadata__": {"format": "pt", "step": 3}})", "");
  EXPECT_ERROR_ENDS(SafetensorsFile{p}, p + ": __metadata__ value of 'step' is not a string");
}

TEST_F(Safetensors, RefusesMissingTensorsFilesAndShards) {
  const std::string p = at("x.safetensors");
  save_safetensors(p, {{"w", torch::ones({1})}});
  SafetensorsFile f(p);
  EXPECT_FALSE(f.has("v"));
  EXPECT_ERROR_ENDS(f.get("v"), "no tensor 'v' in " + p);
  EXPECT_ERROR_ENDS(f.entry("v"), "no tensor 'v' in " + p);
  EXPECT_ERROR_ENDS(SafetensorsFile{at("absent.safetensors")},
                    "cannot open " + at("absent.safetensors") + ": No such file or directory");

  EXPECT_ERROR_ENDS(SafetensorsCheckpoint{dir_},
                    "no model.safetensors or model.safetensors.index.json in " + dir_);

  const std::string ckpt = at("ckpt");
  save_safetensors_checkpoint(ckpt, {{"a", torch::ones({64})}, {"b", torch::ones({64})}}, 256);
  const std::string index = ckpt + "/model.safetensors.index.json";
  ASSERT_TRUE(exists(index));
  ASSERT_EQ(::unlink((ckpt + "/model-00002-of-00002.safetensors").c_str()), 0);
  EXPECT_ERROR_ENDS(SafetensorsCheckpoint{ckpt},
                    index +
                        " puts tensor 'b' in model-00002-of-00002.safetensors, which does not "
                        "exist in " +
                        ckpt);

  // One tensor listed under two shards.
  write_bytes(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                        "a": "model-00002-of-00002.safetensors"}})");
  EXPECT_ERROR_ENDS(SafetensorsCheckpoint{ckpt}, index + ": tensor 'a' is listed in two shards");
  write_bytes(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)");
  EXPECT_NE(error_of([&] {
              SafetensorsCheckpoint c(ckpt);
            }).find(index + ": corrupt JSON: [json.exception.parse_error"),
            std::string::npos);

  // One tensor in two shards' files, the index naming only one of them.
  save_safetensors(ckpt + "/model-00002-of-00002.safetensors",
                   {{"a", torch::zeros({64})}, {"b", torch::ones({64})}});
  write_bytes(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                        "b": "model-00002-of-00002.safetensors"}})");
  SafetensorsCheckpoint c(ckpt);
  EXPECT_TRUE(bit_equal(c.get("a"), torch::ones({64})));
  EXPECT_ERROR_ENDS(c.get("b"),
                    "tensor 'a' is in both " + ckpt +
                        "/model-00002-of-00002.safetensors and "
                        "model-00001-of-00002.safetensors (where the index puts it) in " +
                        ckpt);
}

TEST_F(Safetensors, FailedSavesLeaveNothingBehind) {
  const std::string nowhere = at("no/such/dir/w.safetensors");
  EXPECT_ERROR_ENDS(save_safetensors(nowhere, {{"w", torch::ones({2})}}),
                    "cannot create " + nowhere + ".tmp: No such file or directory");
  EXPECT_FALSE(exists(at("no")));

  // A refused save keeps the old file whole and leaves no temporary.
  const std::string p = at("keep.safetensors");
  save_safetensors(p, {{"w", torch::ones({2})}});
  const std::string before = read_bytes(p);
  EXPECT_ERROR_ENDS(save_safetensors(p, {{"w", torch::ones({2})}, {"w", torch::zeros({2})}}),
                    p + ": tensor 'w' is given twice");
  EXPECT_ERROR_ENDS(save_safetensors(p, {{"z", torch::ones({2}, torch::kComplexFloat)}}),
                    p + ": tensor 'z' has dtype ComplexFloat, which safetensors cannot hold here");
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_FALSE(exists(p + ".tmp"));
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"keep.safetensors"});

  EXPECT_ERROR_ENDS(
      save_safetensors_checkpoint(at("c"), {{"w", torch::ones({2})}, {"w", torch::ones({2})}}),
      at("c") + ": tensor 'w' is given twice");
  EXPECT_FALSE(exists(at("c")));  // refused before anything was created
}

}  // namespace

}  // namespace test_safetensors
