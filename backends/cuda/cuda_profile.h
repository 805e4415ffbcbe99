// TC_CUDA_PROFILE=1: where the time of the CUDA code generator's launch lists goes. Each
// Program::run (not while a CUDA graph records) puts a CUDA event before every step and after the
// last, waits for them, and adds each step's device time to its program's table; at exit every
// program's table goes to stderr: runs, device and host ms per run, and the steps costing most per
// run (generated kernels by name and graph lines, library calls by op and operand sizes). Each
// run starts with a kernel that keeps the device busy for longer than the host takes to enqueue
// the steps (3x the last run's host time, 5 to 200 ms), so the steps run back to back as in a
// CUDA graph replay: a step's figure is its device time, not the host's launch pace. A step that
// waits for the device (an eager library call reading the device's error word after an index
// check, say) lets the device run dry: when a step starts and the device has already reached the
// previous step's start, the previous step is closed with its own end event and the device spins
// again for what is left of the host's run, so the steps after a wait are device-timed too. A program's
// first run (module loads, cuBLASLt's algorithm timing) is left out. TC_CUDA_PROFILE=2 makes every
// eager op, library calls in these lists too, wait for the device (stdlib/cuda/dispatch.cpp):
// its library-call figures include host time.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tc::backends::cuda {

struct ProfileTable;  // one per Program

bool profiling();  // TC_CUDA_PROFILE set (read once)
std::shared_ptr<ProfileTable> profile_table(const std::string& program_label);

// One run's events (construct before the first step, mark before each step, finish after the last).
class ProfileRun {
 public:
  ProfileRun(ProfileTable* t, int device, size_t steps);  // t null: does nothing
  ~ProfileRun();
  void mark(size_t step, const std::string& label);
  void finish();

 private:
  ProfileTable* table_;
  int device_;
  std::vector<void*> events_;  // before each step, and after the last
  std::vector<void*> ends_;    // a step's own end, before a spin that follows it (else null)
  std::vector<std::string> labels_;
  std::chrono::steady_clock::time_point t0_;
  double last_host_ms_ = 0;  // the table's last run's host time, when this run started
};

}  // namespace tc::backends::cuda
