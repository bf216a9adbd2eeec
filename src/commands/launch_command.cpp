#include "quartet/commands/launch_command.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"

namespace quartet {

namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

// Launchers that pass SIGUSR1 on to every rank.
bool relays_usr1(const std::string& program) {
  const std::string name = base_name(program);
  for (const char* l : {"srun", "mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra"})
    if (name == l) return true;
  return false;
}

std::string exe_of(pid_t pid) {
  char buf[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Parent of each process, from /proc/<pid>/stat ("pid (comm) state ppid ...").
std::map<pid_t, pid_t> parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 4 > stat.size()) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2) out[pid] = static_cast<pid_t>(ppid);
  }
  ::closedir(d);
  return out;
}

// The quartet processes below `root`: the ranks this host runs (mpirun forks them; remote ranks
// sit under an orted or slurmstepd elsewhere, which the launcher reaches).
std::vector<pid_t> quartet_descendants(pid_t root) {
  const auto parent = parents();
  const std::string self = exe_of(::getpid());
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    bool below = false;
    for (pid_t p = ppid; p > 1 && !below; ) {
      below = p == root;
      auto it = parent.find(p);
      p = it == parent.end() ? 0 : it->second;
    }
    if (!below) continue;
    const std::string exe = exe_of(pid);
    if (exe == self || base_name(exe) == "quartet") out.push_back(pid);
  }
  return out;
}

pid_t start(const std::vector<std::string>& words, const sigset_t& old_mask) {
  std::vector<char*> argv;
  for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  QUARTET_CHECK(pid >= 0, std::string("quartet launch: cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : kStopSignals) ::sigaction(s, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "quartet launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(pid, pid);  // both sides, so that neither races the other
  return pid;
}

const char* signal_name(int s) {
  switch (s) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

// Whether process pid has a handler for SIGUSR1 (/proc/PID/status, SigCgt): a process that has
// none yet (the first moments of mpirun, or of a rank) would be killed by it, its default action.
bool catches_usr1(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGUSR1 - 1)) & 1;
  return false;
}

// Where a stop request has yet to go: the ranks on this host told so far (one that starts
// later, or has no handler yet, is told at a later tick, so that no request is lost), and
// whether the launcher itself still waits for its copy, owed since when.
std::set<pid_t> g_told;
bool g_launcher_owed = false;
std::chrono::steady_clock::time_point g_owed_since;

// SIGUSR1 to each rank on this host that has not had it and can take it, then the launcher's
// copy when it is owed; returns how many ranks were told. The launcher passes SIGUSR1 on to every
// rank at once, one still loading too (which it would kill), so its copy waits until it has a
// handler and every rank on this host has one; where none runs here (all remote), a second
// after the request.
int deliver(pid_t launcher) {
  int told = 0;
  bool all_ready = true;
  const std::vector<pid_t> ranks = quartet_descendants(launcher);
  for (pid_t p : ranks) {
    const bool ready = catches_usr1(p);
    all_ready = all_ready && ready;
    if (ready && !g_told.count(p) && ::kill(p, SIGUSR1) == 0) {
      g_told.insert(p);
      ++told;
    }
  }
  const bool waited = !ranks.empty() || std::chrono::steady_clock::now() - g_owed_since >= std::chrono::seconds(1);
  if (g_launcher_owed && all_ready && waited && catches_usr1(launcher))
    g_launcher_owed = ::kill(launcher, SIGUSR1) != 0;
  return told;
}

void pass_on(int request, pid_t launcher, const std::string& program, int received) {
  if (request <= 2) {
    g_told.clear();  // a second request goes to every rank again
    const bool relay = relays_usr1(program);
    g_launcher_owed = relay;
    g_owed_since = std::chrono::steady_clock::now();
    const int ranks = deliver(launcher);
    std::fprintf(stderr, "quartet launch: %s (request %d): SIGUSR1 to %d rank(s) on this host%s: %s\n",
                 signal_name(received), request, ranks, relay ? (" and to " + base_name(program)).c_str() : "",
                 request == 1 ? "checkpoint after this iteration and exit 75 (a second request: stop sooner, exit 76)"
                              : "stop at the next safe point without a checkpoint, exit 76 (a third: end the launcher)");
  } else if (request == 3) {
    std::fprintf(stderr, "quartet launch: %s (request 3): SIGTERM to %s, which ends the job now\n",
                 signal_name(received), program.c_str());
    ::kill(launcher, SIGTERM);
  } else {
    std::fprintf(stderr, "quartet launch: %s (request %d): SIGKILL to the launcher's process group\n",
                 signal_name(received), request);
    ::kill(-launcher, SIGKILL);
  }
  std::fflush(stderr);
}

sigset_t launch_signals() {
  sigset_t wanted;
  sigemptyset(&wanted);
  for (int s : kStopSignals) sigaddset(&wanted, s);
  sigaddset(&wanted, SIGCHLD);
  return wanted;
}

}  // namespace

void block_launch_signals() {
  const sigset_t wanted = launch_signals();
  ::sigprocmask(SIG_BLOCK, &wanted, nullptr);
}

int run_launch(const CommandLine& cl) {
  // The signals are taken synchronously (sigtimedwait), so they are blocked from here on (from
  // before main, block_launch_signals); the launcher gets the mask without them.
  const sigset_t wanted = launch_signals();
  sigset_t old_mask;
  QUARTET_CHECK(::sigprocmask(SIG_BLOCK, &wanted, &old_mask) == 0, "quartet launch: cannot block signals");
  for (int s : kStopSignals) sigdelset(&old_mask, s);
  sigdelset(&old_mask, SIGCHLD);
  const pid_t launcher = start(cl.rest, old_mask);
  int requests = 0;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(launcher, &status, WNOHANG);
    if (done == launcher) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      continue;
    }
    siginfo_t info{};
    const timespec tick{0, 200 * 1000 * 1000};  // also looks at the launcher without a SIGCHLD
    const int s = ::sigtimedwait(&wanted, &info, &tick);
    if (s < 0 || s == SIGCHLD) {
      if (requests > 0 && requests <= 2) deliver(launcher);
      continue;
    }
    pass_on(++requests, launcher, cl.rest.front(), s);
  }
}

}  // namespace quartet
