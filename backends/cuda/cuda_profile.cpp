// TC_CUDA_PROFILE=1 (cuda_profile.h).
#include "cuda_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "cuda/runtime.h"

namespace tc::backends::cuda {
namespace drv = tc::cuda;

struct ProfileTable {
  std::string label;
  int64_t runs = 0, warmups = 0;
  double device_ms = 0, host_ms = 0;
  double last_host_ms = 0;  // the spin of the next run covers 3x this
  std::map<std::string, std::pair<double, int64_t>> steps;  // label -> (ms, launches)
};

namespace {
std::mutex g_mu;
std::vector<std::shared_ptr<ProfileTable>>& tables() {
  static auto* v = new std::vector<std::shared_ptr<ProfileTable>>;
  return *v;
}

void print_tables() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& t : tables()) {
    if (t->runs == 0) continue;
    const double n = (double)t->runs;
    std::fprintf(stderr, "tc cuda profile: %s: %lld runs (the first left out), %.3f ms device / %.3f ms host per run\n",
                 t->label.c_str(), (long long)t->runs, t->device_ms / n, t->host_ms / n);
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> v(t->steps.begin(), t->steps.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    std::map<std::string, double> kinds;  // first word of the label
    for (const auto& [label, s] : v) kinds[label.substr(0, label.find(' '))] += s.first;
    for (size_t i = 0; i < v.size() && i < 25; i++)
      std::fprintf(stderr, "  %8.4f ms %5.1f%% x%-4.1f %s\n", v[i].second.first / n,
                   100 * v[i].second.first / std::max(1e-9, t->device_ms), v[i].second.second / n, v[i].first.c_str());
    std::fprintf(stderr, "  by kind:");
    for (const auto& [k, ms] : kinds) std::fprintf(stderr, " %s %.3f", k.c_str(), ms / n);
    std::fprintf(stderr, "\n");
  }
}
}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* p = std::getenv("TC_CUDA_PROFILE");
    const bool v = p && *p && *p != '0';
    if (v) std::atexit(print_tables);
    return v;
  }();
  return on;
}

std::shared_ptr<ProfileTable> profile_table(const std::string& program_label) {
  auto t = std::make_shared<ProfileTable>();
  t->label = program_label;
  std::lock_guard<std::mutex> lock(g_mu);
  tables().push_back(t);
  return t;
}

ProfileRun::ProfileRun(ProfileTable* t, int device, size_t steps) : table_(t), device_(device) {
  if (!table_ || drv::capturing() || drv::compile_only()) {
    table_ = nullptr;
    return;
  }
  events_.resize(steps + 1, nullptr);
  ends_.resize(steps, nullptr);
  labels_.resize(steps);
  for (void*& e : events_) drv::check(drv::drv().EventCreate((CUevent*)&e, CU_EVENT_DEFAULT), "profile event");
  // The device first spins for longer than the host takes to enqueue the steps, so the steps then
  // run back to back: each step's figure is its device time alone, not the host's pace.
  {
    std::lock_guard<std::mutex> lock(g_mu);
    last_host_ms_ = t->last_host_ms;
  }
  drv::spin(device, 1e3 * std::min(200.0, std::max(5.0, 3 * last_host_ms_)));
  t0_ = std::chrono::steady_clock::now();
}

ProfileRun::~ProfileRun() {
  for (void* e : events_)
    if (e) drv::drv().EventDestroy((CUevent)e);
  for (void* e : ends_)
    if (e) drv::drv().EventDestroy((CUevent)e);
}

void ProfileRun::mark(size_t step, const std::string& label) {
  if (!table_) return;
  labels_[step] = label;
  CUstream s = drv::current(device_);
  // (not with TC_CUDA_PROFILE=2, whose eager ops each wait for the device: no figure is device time)
  if (step > 0 && drv::profile_level() < 2 && drv::drv().EventQuery((CUevent)events_[step - 1]) == CUDA_SUCCESS) {
    // the device caught up with the host (the previous step waited for it): close that step (its
    // figure keeps the host's time after its wait) and keep the device busy for 3x what is left
    // of the host's run (at least 5 ms)
    drv::check(drv::drv().EventCreate((CUevent*)&ends_[step - 1], CU_EVENT_DEFAULT), "profile event");
    drv::drv().EventRecord((CUevent)ends_[step - 1], s);
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    drv::spin(device_, 1e3 * std::min(200.0, std::max(5.0, 3 * (last_host_ms_ - elapsed))));
  }
  drv::drv().EventRecord((CUevent)events_[step], s);
}

void ProfileRun::finish() {
  if (!table_) return;
  drv::drv().EventRecord((CUevent)events_.back(), drv::current(device_));
  const double host = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  drv::drv().EventSynchronize((CUevent)events_.back());
  std::lock_guard<std::mutex> lock(g_mu);
  table_->last_host_ms = host;
  // A program's first run loads modules, creates library handles and times cuBLASLt's algorithm
  // candidates (each product several times over): it is left out of the table.
  if (table_->warmups++ == 0) return;
  table_->runs++;
  table_->host_ms += host;
  for (size_t i = 0; i + 1 < events_.size(); i++) {
    float ms = 0;
    drv::drv().EventElapsedTime(&ms, (CUevent)events_[i], (CUevent)(ends_[i] ? ends_[i] : events_[i + 1]));
    auto& s = table_->steps[labels_[i]];
    s.first += ms;
    s.second++;
    table_->device_ms += ms;
  }
}

}  // namespace tc::backends::cuda
