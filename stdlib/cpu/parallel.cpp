// The CPU thread pool behind parallel_for: workers wait on a condition variable for a job,
// each takes one contiguous chunk of the range.
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
    for (int i = 1; i < nthreads_; i++) workers_.emplace_back([this, i, g = generation_] { work(i, g); });
  }

  void run(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& body) {
    std::unique_lock lk(run_mu_);  // one parallel region at a time
    int64_t n = end - begin;
    int parts = (int)std::min<int64_t>(nthreads_, n);
    {
      std::lock_guard g(mu_);
      body_ = &body;
      begin_ = begin;
      end_ = end;
      parts_ = parts;
      pending_ = parts - 1;
      generation_++;
    }
    cv_.notify_all();
    chunk(0);
    std::unique_lock g(mu_);
    done_cv_.wait(g, [&] { return pending_ == 0; });
    body_ = nullptr;
  }

 private:
  void chunk(int part) {
    if (part >= parts_) return;
    int64_t n = end_ - begin_, per = (n + parts_ - 1) / parts_;
    int64_t b = begin_ + part * per, e = std::min(end_, b + per);
    if (b < e) (*body_)(b, e);
  }
  void work(int id, uint64_t seen) {
    for (;;) {
      {
        std::unique_lock g(mu_);
        cv_.wait(g, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        if (id >= parts_) continue;
      }
      in_worker = true;
      chunk(id);
      in_worker = false;
      std::lock_guard g(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
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
  int parts_ = 0, pending_ = 0;
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
  pool().run(begin, end, body);
  in_parallel_region = false;
}

}  // namespace tc
