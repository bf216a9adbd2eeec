#pragma once
// A watchdog for collectives and exchanges. Instead of hanging forever when a rank never joins,
// a watched operation that outlives the timeout is reported (this rank, the operation, what it
// was waiting for) and the whole job is aborted. One background thread polls every watch.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace quartet {

class Watchdog {
  struct Entry;

 public:
  // `on_timeout` receives the report; the default prints it and aborts the MPI job.
  using TimeoutHandler = std::function<void(const std::string& report)>;
  explicit Watchdog(double timeout_seconds, TimeoutHandler on_timeout = {});
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
    void done();

   private:
    friend class Watchdog;
    explicit Watch(std::shared_ptr<Entry> e) : entry_(std::move(e)) {}
    std::shared_ptr<Entry> entry_;
  };

  Watch watch(const std::string& what);
  // Asynchronous work (a collective queued on a GPU stream): the watchdog polls `finished` until
  // it returns true; the caller does not wait.
  void watch_until(const std::string& what, std::function<bool()> finished);

  double timeout_seconds() const { return timeout_; }
  // Watches not yet finished (for tests and for the report).
  std::size_t pending() const;

 private:
  void loop();
  std::shared_ptr<Entry> add(const std::string& what, std::function<bool()> finished);

  double timeout_;
  TimeoutHandler on_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::list<std::shared_ptr<Entry>> entries_;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace quartet
