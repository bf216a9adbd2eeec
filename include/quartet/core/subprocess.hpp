#pragma once
// A long-running child process spoken to in lines: its stdin, stdout and stderr are pipes.
//
// The command line runs as `/bin/sh -c COMMAND` (quoting, variables, `cd dir && ...` as in a
// shell), started with posix_spawn (no fork of a large MPI process) in a process group of its
// own, so that a terminal's Ctrl-C reaches quartet's clean stop and not the program, and so
// that killing the group also ends whatever the shell started. It inherits quartet's working
// directory and environment; signals quartet ignores or blocks are reset for it; quartet's
// other descriptors are closed in it.
//
// exchange() writes a request and waits, with poll(), for one line on stdout until a deadline,
// draining stderr all the while into a ring of the last lines (stderr_tail()), so that a chatty
// program never blocks on a full pipe. Nothing blocks past the deadline. A write to a program
// that has closed its stdin is EPIPE, never a SIGPIPE that would end quartet.
//
// The destructor closes the program's stdin (end of input: the program's cue to exit), waits a
// moment, then kills its process group and reaps it: no zombie, no orphan.
#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <string>

namespace quartet {

class Subprocess {
 public:
  // Starts `/bin/sh -c command`; a quartet::Error when it cannot be started at all (a command
  // that is not found is the shell's exit status 127, seen at the first exchange).
  explicit Subprocess(const std::string& command);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  enum class Outcome {
    line,       // a whole line arrived on stdout (the request was written in full)
    closed,     // the program closed its stdout or its stdin (it exited, most likely)
    timed_out,  // the deadline passed first
    too_long,   // stdout grew past max_line_bytes without ending the line
  };
  struct Reply {
    Outcome outcome = Outcome::timed_out;
    std::string line;  // outcome line: the line, without its '\n'
  };
  // Writes `request` (the caller ends it with '\n') and reads the next line of stdout, both
  // within timeout_seconds from now; a line longer than max_line_bytes is not waited for (its
  // bytes are not kept past the cap: a program writing without end cannot fill the memory).
  static constexpr std::size_t kNoLimit = static_cast<std::size_t>(-1);
  Reply exchange(const std::string& request, double timeout_seconds, std::size_t max_line_bytes = kNoLimit);

  // Gives the program up to grace_seconds to exit by itself, then kills its process group
  // (SIGKILL), reaps it and says how it ended: "exited with status 3", "was killed by signal 11
  // (Segmentation fault)". What it wrote to stderr meanwhile is drained into stderr_tail().
  std::string kill_and_reap(double grace_seconds = 0);
  // The last lines it wrote to stderr (at most kTailLines, each cut at kTailLineBytes), joined
  // by '\n'; "" when it wrote none.
  std::string stderr_tail() const;

  pid_t pid() const { return pid_; }
  const std::string& command() const { return command_; }

  static constexpr std::size_t kTailLines = 20;
  static constexpr std::size_t kTailLineBytes = 400;
  // How long the destructor waits, after closing the program's stdin, before it kills it.
  static constexpr double kShutdownGraceSeconds = 2.0;

 private:
  bool write_some(const std::string& request, std::size_t* written);  // false: EPIPE
  bool read_stdout(std::size_t stop_after);  // false: end of file; reads no more once past stop_after
  void drain_stderr();
  void add_stderr(const char* data, std::size_t n);
  bool wait_for_exit(double seconds);  // true when it has exited within `seconds` (not reaped)
  std::string describe_status() const;

  std::string command_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;  // our ends: its stdin, stdout, stderr
  bool reaped_ = false;
  int status_ = 0;                     // waitpid's, once reaped_ (-1: reaped elsewhere, unknown)
  std::string out_buffer_;             // stdout read past the last line handed out
  bool out_eof_ = false;               // its stdout has ended
  std::deque<std::string> tail_;       // stderr's last lines; the back one may be unfinished
  bool tail_open_line_ = false;        // whether tail_.back() still grows
};

}  // namespace quartet
