#include "quartet/dist/watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "quartet/core/log.hpp"
#include "quartet/dist/rank_local.hpp"

namespace quartet {

struct Watchdog::Entry {
  std::string what;
  std::string status;  // what it waits for now; guarded by the watchdog's mutex
  std::vector<int> participants;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::function<bool()> finished;  // polled, for asynchronous work
  std::atomic<bool> done{false};   // set by a scoped Watch
  Watchdog* owner = nullptr;
};

namespace {

// The roll call's messages on the watchdogs' own communicator.
constexpr int kAskTag = 1;
constexpr int kAnswerTag = 2;
// An answer lists the asked rank's pending watches, one per line.
constexpr char kIdle[] = "";

std::atomic<Watchdog*> g_process{nullptr};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void report_and_abort(const std::string& report) {
  eprintf_rank("%s\n", report.c_str());
  // MPI_Abort from this thread is allowed: the world asked for MPI_THREAD_MULTIPLE.
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// An answer line is "<seconds>\t<what>\t<status>".
struct Doing {
  double seconds = 0;
  std::string what, status;
};

Doing parse_doing(const std::string& line) {
  Doing d;
  const size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
  if (a == std::string::npos) {
    d.what = line;
    return d;
  }
  d.seconds = std::atof(line.substr(0, a).c_str());
  d.what = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) d.status = line.substr(b + 1);
  return d;
}

// One operation, or a part of it: "all_reduce #4 on group 'actor' (...)" and its " (enqueue)".
bool same_operation(const std::string& a, const std::string& b) {
  auto part_of = [](const std::string& x, const std::string& whole) { return x.rfind(whole + " (", 0) == 0; };
  return a == b || part_of(a, b) || part_of(b, a);
}

}  // namespace

Watchdog* Watchdog::process() { return g_process.load(); }
void Watchdog::set_process(Watchdog* dog) { g_process.store(dog); }

Watchdog::Watchdog(double timeout_seconds, TimeoutHandler on_timeout, MPI_Comm roll_call)
    : timeout_(timeout_seconds),
      on_timeout_(on_timeout ? std::move(on_timeout) : TimeoutHandler(report_and_abort)),
      comm_(roll_call) {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_rank(comm_, &world_rank_);
  else world_rank_ = log_rank();
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (process() == this) set_process(nullptr);
  // Answers still in flight go to askers that are aborting the job; they are let go.
  for (auto& a : answers_)
    if (a.request != MPI_REQUEST_NULL) MPI_Request_free(&a.request);
}

std::shared_ptr<Watchdog::Entry> Watchdog::add(const std::string& what, std::function<bool()> finished,
                                               std::vector<int> participants) {
  check_not_rank_local(what);
  auto e = std::make_shared<Entry>();
  e->what = what;
  e->finished = std::move(finished);
  e->participants = std::move(participants);
  e->owner = this;
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(e);
  return e;
}

Watchdog::Watch Watchdog::watch(const std::string& what, std::vector<int> participants) {
  return Watch(add(what, nullptr, std::move(participants)));
}

void Watchdog::watch_until(const std::string& what, std::function<bool()> finished,
                           std::vector<int> participants) {
  add(what, std::move(finished), std::move(participants));
}

std::size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& e : entries_) n += !e->done;
  return n;
}

// Often enough to fire within ~10% of the timeout and to answer a roll call within 0.1 s, never
// busier than every 10 ms.
double Watchdog::poll_seconds() const { return std::min(0.1, std::max(0.01, timeout_seconds() / 10)); }

bool Watchdog::find_overdue(Fired* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto& e = **it;
    // A completion query (cudaEventQuery) takes microseconds: polling under the lock is fine.
    if (!e.done && e.finished && e.finished()) e.done = true;
    if (e.done) {
      it = entries_.erase(it);
      continue;
    }
    const double waited = seconds_since(e.start);
    if (waited > timeout_seconds() && !fired_) {
      fired_ = true;
      *out = Fired{e.what, e.status, e.participants, waited};
      return true;
    }
    ++it;
  }
  return false;
}

std::string Watchdog::describe_pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = kIdle;
  char age[32];
  for (const auto& e : entries_) {
    if (e->done) continue;
    std::snprintf(age, sizeof age, "%.1f", seconds_since(e->start));
    out += std::string(age) + "\t" + e->what + "\t" + e->status + "\n";
  }
  return out;
}

void Watchdog::answer_roll_calls() {
  if (comm_ == MPI_COMM_NULL) return;
  while (!answers_.empty()) {
    int taken = 0;
    MPI_Test(&answers_.front().request, &taken, MPI_STATUS_IGNORE);
    if (!taken) break;
    answers_.pop_front();
  }
  for (;;) {
    int asked = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, comm_, &asked, &st);
    if (!asked) return;
    int nothing = 0;
    MPI_Recv(&nothing, 1, MPI_INT, st.MPI_SOURCE, kAskTag, comm_, MPI_STATUS_IGNORE);
    Answer& a = answers_.emplace_back();  // a deque: the text stays put while it is sent
    a.text = describe_pending();
    MPI_Isend(a.text.data(), static_cast<int>(a.text.size()), MPI_CHAR, st.MPI_SOURCE, kAnswerTag, comm_,
              &a.request);
  }
}

std::string Watchdog::roll_call(const std::vector<int>& participants, const std::string& what,
                                const std::string& lead) {
  std::vector<int> asked;
  std::vector<MPI_Request> asks;
  const int ask = 0;
  for (int p : participants) {
    if (p == world_rank_) continue;
    asked.push_back(p);
    asks.emplace_back();
    MPI_Isend(&ask, 1, MPI_INT, p, kAskTag, comm_, &asks.back());
  }
  // Every watchdog polls for roll calls at least every 0.1 s; the rest is room for a loaded host
  // (CI runs eight ranks on two cores).
  const double window = 2.0;
  std::map<int, std::string> answered;
  const auto start = std::chrono::steady_clock::now();
  while (answered.size() < asked.size() && seconds_since(start) < window) {
    answer_roll_calls();  // the others may be asking us at the same time
    for (int p : asked) {
      if (answered.count(p)) continue;
      int ready = 0;
      MPI_Status st;
      MPI_Iprobe(p, kAnswerTag, comm_, &ready, &st);
      if (!ready) continue;
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      std::string text(static_cast<size_t>(std::max(n, 0)), '\0');
      MPI_Recv(text.data(), n, MPI_CHAR, p, kAnswerTag, comm_, MPI_STATUS_IGNORE);
      answered[p] = text;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Asks that were never taken belong to ranks that are not there; the job ends anyway.
  for (auto& r : asks) MPI_Request_free(&r);

  std::vector<std::string> late, here;
  char buf[64];
  for (int p : asked) {
    const std::string rank = "world rank " + std::to_string(p);
    auto it = answered.find(p);
    if (it == answered.end()) {
      std::snprintf(buf, sizeof buf, "%.1f s", window);
      late.push_back(rank + " (it did not answer the watchdog's roll call within " + std::string(buf) +
                     ": stopped, hung where MPI cannot run, or gone)");
      continue;
    }
    const auto lines = lines_of(it->second);
    bool same = false;
    for (const auto& l : lines) same = same || same_operation(parse_doing(l).what, what);
    if (same) {
      here.push_back(std::to_string(p));
    } else if (lines.empty()) {
      late.push_back(rank + " (alive, but in no watched operation: computing, or blocked where nothing watches)");
    } else {
      const Doing d = parse_doing(lines.front());
      std::snprintf(buf, sizeof buf, "%.1f s", d.seconds);
      late.push_back(rank + " (in " + d.what + " for " + std::string(buf) +
                     (d.status.empty() ? "" : ", " + d.status) + ")");
    }
  }
  std::string out;
  constexpr size_t kNamed = 8;  // a world of thousands would otherwise fill the screen
  for (size_t i = 0; i < late.size() && i < kNamed; ++i) out += (i ? "; " : lead) + late[i];
  if (late.size() > kNamed) out += "; and " + std::to_string(late.size() - kNamed) + " more ranks";
  if (late.empty()) out = "every other rank answered from inside this operation (it is stuck inside MPI or the device)";
  if (!here.empty() && !late.empty()) {
    std::string list;
    for (size_t i = 0; i < here.size() && i < kNamed; ++i) list += (i ? ", " : "") + here[i];
    if (here.size() > kNamed) list += ", ...";
    out += "; in this operation already: world rank" + std::string(here.size() > 1 ? "s " : " ") + list;
  }
  return out;
}

std::string Watchdog::report(const Fired& f) {
  char numbers[128];
  std::snprintf(numbers, sizeof(numbers), " has not finished after %.1f s (dist.watchdog_timeout = %g s)", f.waited,
                timeout_seconds());
  std::string r = "watchdog: rank " + std::to_string(world_rank_) + ": " + f.what + numbers;
  if (!f.status.empty()) r += "; " + f.status;
  if (comm_ != MPI_COMM_NULL && !f.participants.empty())
    r += "; " + roll_call(f.participants, f.what, f.status.empty() ? "waiting for " : "the roll call found ");
  else if (f.status.empty()) r += "; a rank of this group stalled or never joined";
  return r + ". Aborting the job.";
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::duration<double>(poll_seconds()));
    if (stop_) break;
    lock.unlock();
    answer_roll_calls();
    Fired f;
    if (find_overdue(&f)) {
      const std::string text = report(f);
      on_timeout_(text);
    }
    lock.lock();
  }
}

Watchdog::Watch& Watchdog::Watch::operator=(Watch&& other) noexcept {
  if (this != &other) {
    done();
    entry_ = std::move(other.entry_);
  }
  return *this;
}

Watchdog::Watch::~Watch() { done(); }

void Watchdog::Watch::done() {
  if (entry_) entry_->done = true;
  entry_.reset();
}

void Watchdog::Watch::status(const std::string& now) {
  if (!entry_) return;
  std::lock_guard<std::mutex> lock(entry_->owner->mutex_);
  entry_->status = now;
}

void Watchdog::Watch::status(const std::string& now, int world_rank) {
  if (!entry_) return;
  std::lock_guard<std::mutex> lock(entry_->owner->mutex_);
  entry_->status = now;
  entry_->participants = {world_rank};
}

}  // namespace quartet
