#include "quartet/commands/launch_command.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

void pass_on(int request, pid_t launcher, const std::string& program, int received) {
  if (request <= 2) {
    int ranks = 0;
    for (pid_t p : quartet_descendants(launcher)) ranks += ::kill(p, SIGUSR1) == 0;
    const bool relay = relays_usr1(program);
    if (relay) ::kill(launcher, SIGUSR1);
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

}  // namespace

int run_launch(const CommandLine& cl) {
  // The signals are taken synchronously (sigtimedwait), so they are blocked from here on; the
  // launcher gets the old mask back.
  sigset_t wanted, old_mask;
  sigemptyset(&wanted);
  for (int s : kStopSignals) sigaddset(&wanted, s);
  sigaddset(&wanted, SIGCHLD);
  QUARTET_CHECK(::sigprocmask(SIG_BLOCK, &wanted, &old_mask) == 0, "quartet launch: cannot block signals");
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
    if (s < 0 || s == SIGCHLD) continue;
    pass_on(++requests, launcher, cl.rest.front(), s);
  }
}

}  // namespace quartet
