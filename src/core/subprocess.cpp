#include "quartet/core/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>

#include "quartet/core/check.hpp"

extern char** environ;

namespace quartet {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void system_failed(const std::string& what, int error) {
  fail(__FILE__, __LINE__, what + ": " + std::strerror(error));
}

// SIGPIPE blocked in this thread for the scope, and a SIGPIPE that a write in it raised taken
// back before the old mask returns: the write reports EPIPE instead. The process's disposition
// is left alone, so `quartet train | head` still ends quartet as it always did.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    pending_before_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!pending_before_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool pending_before_ = false;
};

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) system_failed("fcntl(O_NONBLOCK)", errno);
}

void close_fd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Milliseconds for poll() until `deadline`, rounded up so that a wait never ends early.
int poll_ms(double deadline) {
  const double ms = std::ceil((deadline - now_seconds()) * 1000.0);
  return ms <= 0 ? 0 : ms >= INT_MAX ? INT_MAX : static_cast<int>(ms);
}

// What the child gets: its pipes as 0, 1, 2 and nothing else of ours; every signal at its
// default and none blocked (quartet blocks or ignores some; those would carry over through
// exec); a process group of its own.
struct SpawnSetup {
  posix_spawn_file_actions_t files;
  posix_spawnattr_t attr;
  SpawnSetup(int in, int out, int err) {
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_adddup2(&files, in, 0);
    posix_spawn_file_actions_adddup2(&files, out, 1);
    posix_spawn_file_actions_adddup2(&files, err, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&files, 3);
#endif
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigemptyset(&all);
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP) sigaddset(&all, sig);  // the C library's own are refused
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
  }
};

}  // namespace

Subprocess::Subprocess(const std::string& command) : command_(command) {
  int in[2], out[2], err[2];
  // O_CLOEXEC: the child keeps only the dup2'd copies; another child started later by this
  // process never holds these pipes open.
  if (pipe2(in, O_CLOEXEC) != 0) system_failed("pipe2", errno);
  if (pipe2(out, O_CLOEXEC) != 0) system_failed("pipe2", errno);
  if (pipe2(err, O_CLOEXEC) != 0) system_failed("pipe2", errno);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  int rc;
  {
    SpawnSetup setup(in[0], out[1], err[1]);
    rc = posix_spawn(&pid_, "/bin/sh", &setup.files, &setup.attr, argv, environ);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  if (rc != 0) {
    pid_ = -1;
    close_fd(&in_);
    close_fd(&out_);
    close_fd(&err_);
    system_failed("cannot start /bin/sh -c '" + command + "'", rc);
  }
  set_nonblocking(in_);
  set_nonblocking(out_);
  set_nonblocking(err_);
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    close_fd(&in_);  // end of input: a well-behaved program exits now
    kill_and_reap(kShutdownGraceSeconds);
  }
  close_fd(&in_);
  close_fd(&out_);
  close_fd(&err_);
}

Subprocess::Reply Subprocess::exchange(const std::string& request, double timeout_seconds, std::size_t max_line_bytes) {
  const double deadline = now_seconds() + timeout_seconds;
  std::size_t written = 0;
  bool writing = !request.empty();
  if (writing && in_ < 0) return {Outcome::closed, ""};
  for (bool first = true;; first = false) {
    const std::size_t newline = out_buffer_.find('\n');
    if ((newline == std::string::npos ? out_buffer_.size() : newline) > max_line_bytes)
      return {Outcome::too_long, out_buffer_.substr(0, 200)};
    if (!writing && newline != std::string::npos) {
      Reply r{Outcome::line, out_buffer_.substr(0, newline)};
      out_buffer_.erase(0, newline + 1);
      return r;
    }
    if (out_eof_) return {Outcome::closed, ""};
    // Checked before each wait, not only when poll() times out: a program that keeps writing
    // to stderr must not stretch the deadline.
    const int wait_ms = poll_ms(deadline);
    if (wait_ms == 0 && !first) return {Outcome::timed_out, ""};
    pollfd fds[3];
    nfds_t n = 0;
    int in_at = -1, err_at = -1;
    if (writing) {
      in_at = static_cast<int>(n);
      fds[n++] = {in_, POLLOUT, 0};
    }
    const int out_at = static_cast<int>(n);
    fds[n++] = {out_, POLLIN, 0};
    if (err_ >= 0) {
      err_at = static_cast<int>(n);
      fds[n++] = {err_, POLLIN, 0};
    }
    if (poll(fds, n, wait_ms) < 0) {
      if (errno == EINTR) continue;  // a stop signal: the trainer looks at it between phases
      system_failed("poll on the pipes of '" + command_ + "'", errno);
    }
    if (err_at >= 0 && fds[err_at].revents) drain_stderr();
    if (in_at >= 0 && fds[in_at].revents) {
      if (!write_some(request, &written)) return {Outcome::closed, ""};
      writing = written < request.size();
    }
    if (fds[out_at].revents) out_eof_ = !read_stdout(max_line_bytes);
  }
}

bool Subprocess::write_some(const std::string& request, std::size_t* written) {
  SigpipeBlocked blocked;
  while (*written < request.size()) {
    const ssize_t n = write(in_, request.data() + *written, request.size() - *written);
    if (n > 0) {
      *written += static_cast<std::size_t>(n);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return true;
    } else if (errno == EPIPE) {
      close_fd(&in_);
      return false;
    } else {
      system_failed("writing to '" + command_ + "'", errno);
    }
  }
  return true;
}

bool Subprocess::read_stdout(std::size_t stop_after) {
  char buf[65536];
  while (out_buffer_.size() <= stop_after) {
    const ssize_t n = read(out_, buf, sizeof buf);
    if (n > 0) {
      out_buffer_.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return false;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return true;
    } else {
      system_failed("reading the output of '" + command_ + "'", errno);
    }
  }
  return true;  // past the cap: exchange() reports a line too long
}

void Subprocess::drain_stderr() {
  char buf[65536];
  // At most 16 reads a call: a program that writes without pause cannot keep quartet here.
  for (int reads = 0; err_ >= 0 && reads < 16; ++reads) {
    const ssize_t n = read(err_, buf, sizeof buf);
    if (n > 0) {
      add_stderr(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      close_fd(&err_);
    } else if (errno == EINTR) {
      continue;
    } else {
      return;  // EAGAIN: nothing more for now (or an error: the tail is only for messages)
    }
  }
}

void Subprocess::add_stderr(const char* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!tail_open_line_) {
      tail_.emplace_back();
      tail_open_line_ = true;
      if (tail_.size() > kTailLines) tail_.pop_front();
    }
    if (data[i] == '\n') {
      tail_open_line_ = false;
    } else if (tail_.back().size() < kTailLineBytes) {
      tail_.back() += data[i];
    } else if (tail_.back().size() == kTailLineBytes) {
      tail_.back() += "...";
    }
  }
}

std::string Subprocess::stderr_tail() const {
  std::string out;
  for (const auto& line : tail_) out += (out.empty() ? "" : "\n") + line;
  return out;
}

bool Subprocess::wait_for_exit(double seconds) {
  const double deadline = now_seconds() + seconds;
  for (;;) {
    siginfo_t info{};
    // WNOWAIT: not reaped yet, so that its pid (its group's id) cannot be taken by another
    // process before the group is killed.
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
      return errno == ECHILD;  // reaped elsewhere: gone
    if (info.si_pid == pid_) return true;
    const int wait_ms = poll_ms(deadline);
    if (wait_ms == 0) return false;
    if (err_ >= 0) {
      pollfd fd{err_, POLLIN, 0};
      if (poll(&fd, 1, std::min(wait_ms, 10)) > 0) drain_stderr();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, 10)));
    }
  }
}

std::string Subprocess::kill_and_reap(double grace_seconds) {
  if (pid_ > 0 && !reaped_) {
    if (grace_seconds > 0) wait_for_exit(grace_seconds);
    kill(-pid_, SIGKILL);  // the group: whatever the shell or the program started ends too
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    reaped_ = true;
    status_ = r == pid_ ? status : -1;
  }
  close_fd(&in_);
  drain_stderr();  // what the (now ended) program left in the pipe
  return describe_status();
}

std::string Subprocess::describe_status() const {
  if (!reaped_) return "is running";
  if (status_ == -1) return "has ended (its exit status was collected elsewhere in the process)";
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) {
    const int sig = WTERMSIG(status_);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status_);
}

}  // namespace quartet
