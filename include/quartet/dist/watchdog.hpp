#pragma once
// A watchdog for collectives, exchanges and collective file I/O. Instead of hanging forever when
// a rank never joins, a watched operation that outlives the timeout is reported and the whole
// job is aborted. One background thread polls every watch.
//
// The report names this rank, the operation, and the ranks it waits for. A watch that knows its
// participants (the world ranks of its communicator) takes a roll call before it reports: the
// watchdog asks each participant's watchdog, over a communicator of its own, what that rank is
// doing. A rank in the same operation has arrived; a rank elsewhere answers with the operation
// it is in; a rank that does not answer within a few polling periods is stopped, hung outside
// MPI's reach, or gone. Every watchdog answers roll calls whatever its own rank is doing, since
// its thread runs beside the main one (MPI_THREAD_MULTIPLE).
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace quartet {

class Watchdog {
  struct Entry;

 public:
  // `on_timeout` receives the report; the default prints it and aborts the MPI job.
  using TimeoutHandler = std::function<void(const std::string& report)>;
  // `roll_call`: a communicator over the whole world reserved for the watchdogs (World's
  // watchdog_comm()), or MPI_COMM_NULL for none (the report then names no rank it waits for).
  explicit Watchdog(double timeout_seconds, TimeoutHandler on_timeout = {},
                    MPI_Comm roll_call = MPI_COMM_NULL);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A scoped watch over blocking host work: done when it is destroyed (or done() is called).
  class Watch {
   public:
    Watch() = default;
    Watch(Watch&&) noexcept = default;
    Watch& operator=(Watch&&) noexcept;
    ~Watch();
    // What the operation waits for now; the report quotes it ("waiting for rank 5").
    void status(const std::string& now);
    // The same, for one rank in particular: the roll call then asks that rank what it is doing
    // (it may itself be waiting for another).
    void status(const std::string& now, int world_rank);
    void done();

   private:
    friend class Watchdog;
    explicit Watch(std::shared_ptr<Entry> e) : entry_(std::move(e)) {}
    std::shared_ptr<Entry> entry_;
  };

  // `what` names one operation the same way on every rank that takes part in it (an operation
  // and its sequence number on a communicator), so that a roll call can tell who has arrived.
  // `participants`: the world ranks that take part (empty: no roll call).
  Watch watch(const std::string& what, std::vector<int> participants = {});
  // Asynchronous work (a collective queued on a GPU stream): the watchdog polls `finished` until
  // it returns true; the caller does not wait.
  void watch_until(const std::string& what, std::function<bool()> finished,
                   std::vector<int> participants = {});

  double timeout_seconds() const { return timeout_.load(); }
  // The deck's dist.watchdog_timeout, once it is read (start-up runs under a default).
  void set_timeout(double seconds) { timeout_.store(seconds); }
  // Watches not yet finished (for tests and for the report).
  std::size_t pending() const;

  // The watchdog of this process, which dist/watched_mpi.hpp's collectives use; nullptr before
  // the runtime starts one (MPI start-up) and in tools that never start MPI.
  static Watchdog* process();
  static void set_process(Watchdog* dog);

 private:
  struct Fired {
    std::string what, status;
    std::vector<int> participants;
    double waited = 0;
  };
  void loop();
  std::shared_ptr<Entry> add(const std::string& what, std::function<bool()> finished,
                             std::vector<int> participants);
  // The first watch past the timeout, if any; finished watches are dropped on the way.
  bool find_overdue(Fired* out);
  std::string report(const Fired& f);
  // What this rank is doing, as answered to a roll call: its pending watches, oldest first.
  std::string describe_pending() const;
  // Answers every roll call that has arrived, and lets go of answers the askers have taken.
  void answer_roll_calls();
  // Asks `participants` what they are doing: `lead`, then the ranks that are not in `what`.
  std::string roll_call(const std::vector<int>& participants, const std::string& what, const std::string& lead);
  double poll_seconds() const;

  std::atomic<double> timeout_;
  TimeoutHandler on_timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int world_rank_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::list<std::shared_ptr<Entry>> entries_;
  // Answers sent and not yet taken (touched by the watchdog's thread only).
  struct Answer {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::deque<Answer> answers_;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace quartet
