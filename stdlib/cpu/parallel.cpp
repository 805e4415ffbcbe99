// The CPU thread pool behind parallel_for: workers wait on a condition variable for a job whose
// range is cut into chunks; the caller and the workers take chunks until none is left, and the
// caller waits only for chunks taken and not finished, never for a worker that took none (on a
// loaded machine a worker may wake after the caller has done all the work).
#include "tc/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace tc {
namespace {

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return nthreads_; }
  void resize(int n) {
    stop();
    nthreads_ = std::max(1, n);
    quit_ = false;
    // Workers start at the current generation: a job that finished before the resize is not rerun.
    for (int i = 1; i < nthreads_; i++) workers_.emplace_back([this, g = generation_] { work(g); });
  }

  void run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    std::unique_lock lk(run_mu_);  // one parallel region at a time
    const int64_t n = end - begin;
    // One chunk per thread at least (as many as the range allows); up to 4 per thread while
    // each keeps `grain` elements, so a thread that starts late still finds work to share.
    const int64_t parts = std::max(std::min<int64_t>(nthreads_, n), std::min<int64_t>(4 * nthreads_, n / grain));
    {
      std::lock_guard g(mu_);
      body_ = &body;
      begin_ = begin;
      end_ = end;
      parts_ = parts;
      next_ = 0;
      done_ = 0;
      generation_++;
    }
    cv_.notify_all();
    while (take_and_run()) {
    }
    std::unique_lock g(mu_);
    done_cv_.wait(g, [&] { return done_ == parts_; });
    body_ = nullptr;
  }

 private:
  // Takes the next chunk of the current job and runs it; false when none is left.
  bool take_and_run() {
    int64_t b, e;
    const std::function<void(int64_t, int64_t)>* body;
    {
      std::lock_guard g(mu_);
      if (next_ >= parts_) return false;
      const int64_t part = next_++, n = end_ - begin_;
      b = begin_ + n * part / parts_;
      e = begin_ + n * (part + 1) / parts_;
      body = body_;
    }
    if (b < e) (*body)(b, e);
    std::lock_guard g(mu_);
    if (++done_ == parts_) done_cv_.notify_one();
    return true;
  }
  void work(uint64_t seen) {
    for (;;) {
      {
        std::unique_lock g(mu_);
        cv_.wait(g, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
      }
      in_worker = true;
      while (take_and_run()) {
      }
      in_worker = false;
    }
  }
  void stop() {
    {
      std::lock_guard g(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

 public:
  static thread_local bool in_worker;

 private:
  int nthreads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t begin_ = 0, end_ = 0;
  int64_t parts_ = 0, next_ = 0, done_ = 0;  // chunks of the job: all, taken, finished
  uint64_t generation_ = 0;
  bool quit_ = false;
};
thread_local bool Pool::in_worker = false;

Pool& pool() {
  static Pool p((int)std::max(1u, std::thread::hardware_concurrency()));
  return p;
}
thread_local bool in_parallel_region = false;

}  // namespace

int get_num_threads() { return pool().size(); }

void set_num_threads(int n) {
  pool().resize(n);
  openblas_set_num_threads(std::max(1, n));
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  if (end - begin <= grain || pool().size() == 1 || in_parallel_region || Pool::in_worker) {
    body(begin, end);
    return;
  }
  in_parallel_region = true;
  pool().run(begin, end, std::max<int64_t>(1, grain), body);
  in_parallel_region = false;
}

}  // namespace tc
