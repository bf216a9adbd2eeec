// Rewards in the user's own code, below the trainer: the child process and its pipes
// (core/subprocess.hpp) with real /bin/sh programs, the JSON of the protocol
// (rl/rewards/reward_protocol.hpp), and the command: reward's checks of what a program answers
// (rl/rewards/reward_program.hpp). The whole path, with Python programs and an HTTP server under
// `quartet train`, is tests/rl/check_reward_programs.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <limits>
#include <thread>

#include "quartet/core/subprocess.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_program.hpp"
#include "quartet/rl/rewards/reward_protocol.hpp"
#include "quartet/rl/rewards/user_code_rewards.hpp"
#include "test_main.hpp"

using namespace quartet;
using json = nlohmann::json;
using test::error_of;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_reward_programs {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Whether `pid` is gone (or a zombie left to init): /proc/<pid>/stat's state.
bool process_gone(pid_t pid) {
  for (int i = 0; i < 100; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    if (!stat) return true;
    std::string skip, state;
    stat >> skip >> skip >> state;
    if (state == "Z") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<RewardSample> samples(std::vector<int64_t> rows) {
  std::vector<RewardSample> out;
  for (int64_t r : rows) {
    RewardSample s;
    s.prompt = "sort 321=";
    s.completion = "123";
    s.answer = "123";
    s.row = r;
    out.push_back(s);
  }
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// ---- the child process ----------------------------------------------------------------------

TEST(Subprocess, RoundTripsLinesAndKeepsRunning) {
  Subprocess p("cat");
  for (const std::string line : {"first", "second {\"id\": 2}"}) {
    Subprocess::Reply r = p.exchange(line + "\n", 10);
    ASSERT_EQ(r.outcome, Subprocess::Outcome::line);
    EXPECT_EQ(r.line, line);
  }
}

TEST(Subprocess, LargeRequestAndReplyAtOnce) {
  // 4 MB through cat: it writes back while quartet is still writing, so both pipes fill; only
  // reading while writing gets through.
  Subprocess p("cat");
  const std::string big(4 << 20, 'x');
  Subprocess::Reply r = p.exchange(big + "\n", 30);
  ASSERT_EQ(r.outcome, Subprocess::Outcome::line);
  EXPECT_EQ(r.line, big);
}

TEST(Subprocess, LineWithoutEndStopsAtItsCap) {
  // A program that writes without a newline and without end: the reply is given up past the cap,
  // with the line's start, and no more than about the cap is kept.
  Subprocess p("yes 7 | tr -d '\\n'");
  Subprocess::Reply r = p.exchange("ping\n", 30, 1 << 20);
  ASSERT_EQ(r.outcome, Subprocess::Outcome::too_long);
  EXPECT_EQ(r.line, std::string(200, '7'));
  // A line within the cap is a line.
  Subprocess q("cat");
  EXPECT_EQ(q.exchange(std::string(1000, 'x') + "\n", 30, 1000).outcome, Subprocess::Outcome::line);
  EXPECT_EQ(q.exchange(std::string(1001, 'x') + "\n", 30, 1000).outcome, Subprocess::Outcome::too_long);
}

TEST(Subprocess, ChattyStderrDoesNotBlockIt) {
  // 1 MB on stderr before it reads a byte: stderr is drained while quartet waits.
  Subprocess p("head -c 1000000 /dev/zero | tr '\\0' 'e' >&2; echo; cat");
  Subprocess::Reply r = p.exchange("ping\n", 30);
  ASSERT_EQ(r.outcome, Subprocess::Outcome::line);
  EXPECT_EQ(r.line, "");  // the bare echo first
  EXPECT_EQ(p.exchange("", 30).line, "ping");
}

TEST(Subprocess, DeadlineIsKept) {
  Subprocess p("sleep 30");
  const auto start = std::chrono::steady_clock::now();
  Subprocess::Reply r = p.exchange("hello\n", 0.3);
  EXPECT_EQ(r.outcome, Subprocess::Outcome::timed_out);
  EXPECT_GE(seconds_since(start), 0.3);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(p.kill_and_reap(), "was killed by signal 9 (Killed)");
  EXPECT_TRUE(process_gone(p.pid()));
}

TEST(Subprocess, StderrKeepsTheDeadlineToo) {
  // A program that writes to stderr without pause must not stretch the deadline.
  Subprocess p("yes noise >&2");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.exchange("hello\n", 0.5).outcome, Subprocess::Outcome::timed_out);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(p.kill_and_reap(), "was killed by signal 9 (Killed)");
  EXPECT_EQ(p.stderr_tail().substr(0, 5), "noise");
}

TEST(Subprocess, ExitStatusAndLastStderrLines) {
  Subprocess p("for i in $(seq 1 30); do echo line $i >&2; done; exit 3");
  EXPECT_EQ(p.exchange("hello\n", 10).outcome, Subprocess::Outcome::closed);
  EXPECT_EQ(p.kill_and_reap(2), "exited with status 3");
  std::string want;
  for (int i = 11; i <= 30; ++i) want += (i == 11 ? "" : "\n") + std::string("line ") + std::to_string(i);
  EXPECT_EQ(p.stderr_tail(), want);
}

TEST(Subprocess, KilledBySignalIsNamed) {
  Subprocess p("echo about to end >&2; kill -TERM $$");
  EXPECT_EQ(p.exchange("hello\n", 10).outcome, Subprocess::Outcome::closed);
  EXPECT_EQ(p.kill_and_reap(2), "was killed by signal 15 (Terminated)");
  EXPECT_EQ(p.stderr_tail(), "about to end");
}

TEST(Subprocess, ClosedStdinIsNotASigpipe) {
  // The program closes its stdin and lives on: writing to it is EPIPE, and this process (which
  // has SIGPIPE at its default, deadly disposition) lives on too.
  ASSERT_EQ(signal(SIGPIPE, SIG_DFL), SIG_DFL);
  // 1 MB: more than a pipe holds, so the write is still going when the program closes its end.
  Subprocess p("exec 0<&-; echo closed >&2; sleep 30");
  const std::string big(1 << 20, 'x');
  EXPECT_EQ(p.exchange(big + "\n", 10).outcome, Subprocess::Outcome::closed);
  EXPECT_EQ(p.kill_and_reap(), "was killed by signal 9 (Killed)");
}

TEST(Subprocess, NotFoundIsTheShellsStatus127) {
  Subprocess p("quartet_no_such_program_anywhere");
  EXPECT_EQ(p.exchange("hello\n", 10).outcome, Subprocess::Outcome::closed);
  EXPECT_EQ(p.kill_and_reap(2), "exited with status 127");
  EXPECT_TRUE(contains(p.stderr_tail(), "not found")) << p.stderr_tail();
}

TEST(Subprocess, DestructorEndsTheProgramAndWhatItStarted) {
  pid_t program, background;
  {
    // A child of the program in the background, which ignores the end of input: the process
    // group's kill ends it.
    Subprocess p("sleep 60 & echo $!; cat");
    Subprocess::Reply r = p.exchange("", 10);
    ASSERT_EQ(r.outcome, Subprocess::Outcome::line);
    background = std::stoi(r.line);
    program = p.pid();
  }
  EXPECT_TRUE(process_gone(program));
  EXPECT_TRUE(process_gone(background));
}

TEST(Subprocess, SignalsQuartetIgnoresAreTheProgramsDefaults) {
  // quartet's ignored SIGINT must not carry over into the program (a user's Ctrl-C handler
  // depends on it): the program reports its own SIGINT disposition through /proc.
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &old);
  Subprocess p("grep SigIgn /proc/self/status");
  sigaction(SIGINT, &old, nullptr);
  Subprocess::Reply r = p.exchange("", 10);
  ASSERT_EQ(r.outcome, Subprocess::Outcome::line);
  const unsigned long long ignored = std::stoull(r.line.substr(r.line.find_first_of("0123456789abcdef")), nullptr, 16);
  EXPECT_EQ(ignored & (1ull << (SIGINT - 1)), 0u) << r.line;
  EXPECT_EQ(ignored & (1ull << (SIGPIPE - 1)), 0u) << r.line;
}

// ---- the protocol's JSON --------------------------------------------------------------------

TEST(RewardProtocol, ProgramRequestIsOneLine) {
  std::vector<RewardSample> batch = samples({4, 9});
  batch[1].completion = "two\nlines";
  batch[1].answer = nullptr;
  batch[1].metadata = {{"source", "gsm8k"}, {"level", 3}};
  const std::string line = program_request(7, batch);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const json j = json::parse(line);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["id"], 7);
  ASSERT_EQ(j["samples"].size(), 2u);
  EXPECT_EQ(j["samples"][0], json({{"row", 4}, {"prompt", "sort 321="}, {"completion", "123"}, {"answer", "123"},
                                   {"metadata", nullptr}}));
  EXPECT_EQ(j["samples"][1]["completion"], "two\nlines");
  EXPECT_EQ(j["samples"][1]["answer"], nullptr);
  EXPECT_EQ(j["samples"][1]["metadata"]["level"], 3);
}

TEST(RewardProtocol, InvalidUtf8IsReplacedNotRefused) {
  std::vector<RewardSample> batch = samples({0});
  batch[0].completion = "caf\xc3";  // cut inside a two-byte character
  const json j = json::parse(program_request(1, batch));
  EXPECT_EQ(j["samples"][0]["completion"], "caf\xef\xbf\xbd");  // U+FFFD
}

TEST(RewardProtocol, EndpointRequestHasOpenRlhfsFields) {
  std::vector<RewardSample> batch = samples({1, 2});
  batch[1].answer = nullptr;
  const json j = json::parse(endpoint_request(batch));
  EXPECT_EQ(j["query"], json({"sort 321=123", "sort 321=123"}));
  EXPECT_EQ(j["prompts"], json({"sort 321=", "sort 321="}));
  EXPECT_EQ(j["labels"], json({"123", ""}));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["samples"][1]["row"], 2);
}

TEST(RewardProtocol, ScoresAreCheckedOneByOne) {
  const std::vector<RewardSample> batch = samples({10, 11, 12});
  EXPECT_EQ(scores_from(json::parse("[0, 0.5, -2e3]"), batch, "p"), (std::vector<double>{0, 0.5, -2000}));
  EXPECT_TRUE(contains(error_of([&] { scores_from(json::parse("[1, 2]"), batch, "p"); }),
                       "p: 2 scores came back for 3 samples (prompt rows 10, 11, 12 (3 samples))"));
  EXPECT_TRUE(contains(error_of([&] { scores_from(json::parse("[1, null, 2]"), batch, "p"); }),
                       "p: score 1 (prompt row 11 of rollout.prompts) is null, not a finite number"));
  // JSON has no infinity or NaN, but a json value made otherwise may hold one.
  const json infinite = json::array({1, 2, std::numeric_limits<double>::infinity()});
  EXPECT_TRUE(contains(error_of([&] { scores_from(infinite, batch, "p"); }),
                       "p: score 2 (prompt row 12 of rollout.prompts) is inf, not a finite number"));
  try {
    const json parsed = json::parse("[1, 2, 1e999]");
    ADD_FAILURE() << "1e999 parsed as " << parsed;
  } catch (const json::exception& e) {
    EXPECT_EQ(json_reason(e), "number overflow parsing '1e999'");
  }
  EXPECT_TRUE(contains(error_of([&] { scores_from(json::parse("[1, 2, \"3\"]"), batch, "p"); }),
                       "is \"3\", not a finite number"));
  EXPECT_TRUE(contains(error_of([&] { scores_from(json::parse("{\"a\": 1}"), batch, "p"); }),
                       "p: the scores are not a list but {\"a\":1}"));
}

TEST(RewardProtocol, NanAndInfinityInARawReplyAreNamedWithTheirRow) {
  // What Python's json.dumps writes for float('nan') and float('inf'): not JSON, named as such.
  const std::vector<RewardSample> batch = samples({10, 11, 12});
  EXPECT_EQ(nonfinite_in_reply(R"({"id": 3, "scores": [0.5, [1], NaN]})", batch), "NaN at scores[2] (prompt row 12)");
  EXPECT_EQ(nonfinite_in_reply(R"({"rewards":[-Infinity, 1, 2]})", batch), "-Infinity at rewards[0] (prompt row 10)");
  EXPECT_EQ(nonfinite_in_reply(R"({"scores": [1, 2, 3, 4, Infinity]})", batch), "Infinity at scores[4]");
  EXPECT_EQ(nonfinite_in_reply(R"({"scores": [1, 2, 3], "why": "NaN-free"})", batch), "");
  EXPECT_EQ(nonfinite_in_reply("Loading... done", batch), "");
}

TEST(RewardProtocol, ManyRowsAreShortened) {
  std::vector<int64_t> rows;
  for (int64_t r = 100; r < 120; ++r) rows.push_back(r);
  EXPECT_EQ(batch_rows(samples(rows)), "prompt rows 100, 101, 102, 103, 104, 105, 106, 107, ..., 119 (20 samples)");
  EXPECT_EQ(batch_rows(samples({5})), "prompt row 5 (1 sample)");
  EXPECT_EQ(batch_rows(samples({7, 7, 3, 3, 7})), "prompt rows 7, 3 (5 samples)");
}

// ---- the command: reward ----------------------------------------------------------------------

namespace {
RewardCallConfig quick() {
  RewardCallConfig c;
  c.timeout = 5;
  c.start_timeout = 5;
  return c;
}
// A program that answers the empty first request, then each line of `replies` in turn, then
// reads on until the end of its input.
std::string answering(const std::vector<std::string>& replies) {
  std::string sh = "read l; echo '{\"id\": 0, \"scores\": []}'; ";
  for (const auto& r : replies) sh += "read l; echo '" + r + "'; ";
  return sh + "cat >/dev/null";
}
}  // namespace

TEST(RewardProgram, ScoresComeBackInOrder) {
  auto reward = start_reward_program(answering({"{\"id\": 1, \"scores\": [0.25, 1]}", "{\"id\": 2, \"scores\": [3]}"}),
                                     quick());
  EXPECT_EQ(reward->name(), "command");
  EXPECT_EQ(reward->score(samples({1, 2})), (std::vector<double>{0.25, 1}));
  EXPECT_EQ(reward->score(samples({3})), (std::vector<double>{3}));
}

TEST(RewardProgram, WrongIdIsRefused) {
  auto reward = start_reward_program(answering({"{\"id\": 5, \"scores\": [1]}"}), quick());
  const std::string e = error_of([&] { reward->score(samples({8})); });
  EXPECT_TRUE(contains(e, "answered the batch of prompt row 8 (1 sample) with id 5 where 1 was expected")) << e;
  EXPECT_TRUE(contains(e, "the program was killed by signal 9")) << e;
  // Stopped: later batches are refused at once rather than sent to nothing.
  EXPECT_TRUE(contains(error_of([&] { reward->score(samples({9})); }), "was stopped by an earlier error"));
}

TEST(RewardProgram, TheProgramsOwnErrorIsQuoted) {
  auto reward = start_reward_program(
      "echo starting >&2; " + answering({"{\"id\": 1, \"error\": \"row 4 has no answer\"}"}), quick());
  const std::string e = error_of([&] { reward->score(samples({4})); });
  EXPECT_TRUE(contains(e, "reported an error for the batch of prompt row 4 (1 sample): row 4 has no answer")) << e;
  EXPECT_TRUE(contains(e, "its last lines on stderr:\n    | starting")) << e;
}

TEST(RewardProgram, ReplyWithoutScoresIsRefused) {
  auto reward = start_reward_program(answering({"{\"id\": 1}"}), quick());
  EXPECT_TRUE(contains(error_of([&] { reward->score(samples({4})); }), "without \"scores\""));
}

TEST(RewardProgram, ProgramThatNeverStartsIsRefusedAtStart) {
  const std::string e = error_of([&] { start_reward_program("quartet_no_such_program_anywhere --flag", quick()); });
  EXPECT_TRUE(contains(e, "reward program 'quartet_no_such_program_anywhere --flag' (model.reward.kind) closed its "
                          "pipes before answering its first, empty request (id 0); the program exited with status "
                          "127; its last lines on stderr:\n    | "))
      << e;
}

TEST(RewardProgram, SlowStartIsRefusedByStartTimeout) {
  RewardCallConfig c = quick();
  c.start_timeout = 0.3;
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { start_reward_program("sleep 30", c); });
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_TRUE(contains(e, "did not answer its first, empty request (id 0) within 0.3 s (model.reward.start_timeout)"))
      << e;
}

TEST(UserCodeRewards, KindsAndUrls) {
  EXPECT_TRUE(parse_reward_kind("command:python3 x.py").is_user_code());
  EXPECT_TRUE(parse_reward_kind("http://127.0.0.1:5000/score").is_user_code());
  EXPECT_TRUE(parse_reward_kind("https://rm.example/score").is_user_code());
  EXPECT_FALSE(parse_reward_kind("rule:add").is_user_code());
  EXPECT_FALSE(parse_reward_kind("model").is_user_code());
  EXPECT_EQ(parse_reward_kind("http://h:1/x").argument, "http://h:1/x");
  EXPECT_EQ(parse_reward_kind("http:http://h:1/x").argument, "http://h:1/x");
  EXPECT_EQ(parse_reward_kind("http:https://h/x").argument, "https://h/x");
  EXPECT_TRUE(contains(error_of([] { make_user_code_reward(parse_reward_kind("http:ftp://h/x"), RewardCallConfig{}); }),
                       "'ftp://h/x' is not an http:// or https:// URL"));
}

}  // namespace test_reward_programs
