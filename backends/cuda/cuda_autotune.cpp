// mode = "max-autotune": launch variants of generated kernels, timed once, the choice cached on
// disk (cuda_autotune.h).
#include "cuda_autotune.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "cpu/disk_cache.h"
#include "cuda/runtime.h"
#include "tc/cuda.h"
#include "tc/error.h"

namespace tc::backends::cuda {

namespace drv = tc::cuda;

namespace {

constexpr int kTuneVersion = 1;  // bump when the choice format or the variants change meaning
constexpr int kReps = 10;        // timed launches per variant (after one warm-up launch)
// A variant replaces the planned shape (the first) only when the planned one is this much slower
// (timing noise: 3 %), as cuBLASLt's algorithm pick.
constexpr double kSlack = 1.03;

bool tunable(const std::vector<KernelShape>& shapes) { return shapes.size() > 1 && shapes.back().variant; }

}  // namespace

std::vector<KernelShape> with_variants(const lower::Kernel& k, std::vector<KernelShape> planned) {
  if (planned.size() != 1 || planned[0].device_fn || k.two_level()) return planned;
  const std::optional<KernelWork> w = kernel_work(k, nullptr);
  if (!w) return planned;
  const KernelShape p = planned[0];
  auto add = [&](KernelShape s) {
    s.variant = true;
    for (const KernelShape& o : planned) {
      KernelShape a = o, b = s;
      a.variant = b.variant = false;
      if (a == b) return;
    }
    planned.push_back(s);
  };
  if (p.split) {  // fewer slices, or a block per row
    KernelShape s = p;
    const int tiles = w->outer > kSplitTile ? (int)((w->outer + kSplitTile - 1) / kSplitTile) : 1;
    s.split = tiles * std::max(1, p.split / tiles / 4);  // (a multiple of the tiles)
    add(s);
    s = p;
    s.split = 0;
    s.threads_per_row = s.block = 1024;
    add(s);
  } else if (p.threads_per_row == 1) {  // pointwise (or tiny rows): block size, vector or unrolled
    for (int b : {128, 512}) {
      KernelShape s = p;
      s.block = b;
      add(s);
    }
    if (p.vec > 1) {
      KernelShape s = p;
      s.vec = 1, s.unroll = 4;
      add(s);
    }
  } else if (p.threads_per_row == 32) {  // a warp per row: rows per block, or a block per row
    for (int b : {128, 512}) {
      KernelShape s = p;
      s.block = b;
      add(s);
    }
    if (w->row > 1024) {
      KernelShape s = p;
      s.threads_per_row = s.block = 256;
      add(s);
    }
  } else {  // a block per row: its size
    for (int b : {256, 512, 1024}) {
      KernelShape s = p;
      s.threads_per_row = s.block = b;
      add(s);
    }
  }
  return planned;
}

std::string choices_text(const Program& p) {
  std::string s;
  for (size_t i = 0; i < p.static_launches.size(); i++) {
    const lower::Step& st = p.graph.steps[i];
    if (st.kind == lower::Step::Kind::Launch && tunable(p.shapes[st.launch.kernel]))
      s += std::to_string(i) + " " + std::to_string(p.static_launches[i].shape) + "\n";
  }
  return s;
}

bool apply_choices(Program& p, const std::string& text) {
  std::istringstream in(text);
  std::vector<std::pair<size_t, int>> choices;
  size_t step;
  int shape;
  while (in >> step >> shape) {
    if (step >= p.static_launches.size() || p.graph.steps[step].kind != lower::Step::Kind::Launch) return false;
    const int k = p.graph.steps[step].launch.kernel;
    if (!tunable(p.shapes[k]) || shape < 0 || shape >= (int)p.shapes[k].size()) return false;
    choices.push_back({step, shape});
  }
  if (!in.eof()) return false;
  for (auto [i, sh] : choices) {
    Program::StaticLaunch& sl = p.static_launches[i];
    const int k = p.graph.steps[i].launch.kernel;
    sl.shape = sh;
    sl.grid = p.grid(p.shapes[k][sh], sl.n_outer, p.graph.kernels[k].two_level());
  }
  return true;
}

namespace {

// Times every variant of every tunable launch of `p` on zero-filled scratch buffers and sets the
// fastest (compile-only mode: nothing runs, the planned shapes stay chosen).
void time_variants(Program& p) {
  if (drv::compile_only()) return;
  const lower::LoweredGraph& g = p.graph;
  const Device d{DeviceType::CUDA, p.device};
  CUstream stream = drv::current(p.device);
  std::vector<std::shared_ptr<Storage>> keep;
  auto scratch = [&](int64_t bytes) {
    bytes = std::max<int64_t>(bytes, 16);
    keep.push_back(Storage::allocate((size_t)bytes, d));
    drv::check(drv::drv().MemsetD8Async((CUdeviceptr)keep.back()->data(), 0, (size_t)bytes, stream), "autotune scratch");
    return (char*)keep.back()->data();
  };
  const std::vector<int64_t> none;
  char* arena = g.arena_bytes_static > 0 ? scratch(g.arena_bytes_static) : nullptr;
  std::vector<void*> ptr(g.buffers.size());
  for (size_t i = 0; i < g.buffers.size(); i++) {
    const lower::Buffer& b = g.buffers[i];
    if (b.kind == lower::Buffer::Kind::Temp && b.offset >= 0 && arena) ptr[i] = arena + b.offset;
    else ptr[i] = scratch(b.numel.eval(none) * (int64_t)itemsize(b.dtype));
  }
  void* err = reinterpret_cast<void*>(drv::dev(p.device).error_word);
  CUevent e0, e1;
  drv::check(drv::drv().EventCreate(&e0, CU_EVENT_DEFAULT), "autotune event");
  drv::check(drv::drv().EventCreate(&e1, CU_EVENT_DEFAULT), "autotune event");
  std::map<std::pair<int, std::vector<int64_t>>, int> chosen;  // (kernel, sizes) -> shape
  for (size_t step = 0; step < g.steps.size(); step++) {
    const lower::Step& s = g.steps[step];
    if (s.kind != lower::Step::Kind::Launch || !tunable(p.shapes[s.launch.kernel])) continue;
    const int k = s.launch.kernel;
    Program::StaticLaunch& sl = p.static_launches[step];
    const bool two_level = g.kernels[k].two_level();
    auto memo = chosen.find({k, sl.sizes});
    if (memo == chosen.end()) {
      std::vector<void*> ptrs;
      for (int b : s.launch.buffers) ptrs.push_back(ptr[b]);
      std::vector<int64_t> sizes = sl.sizes;
      int64_t n_outer = sl.n_outer;
      std::vector<void*> args;
      for (void*& q : ptrs) args.push_back(&q);
      for (int64_t& v : sizes) args.push_back(&v);
      args.push_back(&n_outer);
      args.push_back(&err);
      std::vector<double> times(p.shapes[k].size(), std::numeric_limits<double>::infinity());
      for (size_t j = 0; j < p.shapes[k].size(); j++) {
        const KernelShape& sh = p.shapes[k][j];
        const unsigned grid = p.grid(sh, n_outer, two_level);
        float ms = 0;
        try {
          drv::launch(p.device, (CUfunction)p.functions[k][j], grid, (unsigned)sh.block, args.data());
          drv::check(drv::drv().EventRecord(e0, stream), "autotune event");
          for (int r = 0; r < kReps; r++)
            drv::launch(p.device, (CUfunction)p.functions[k][j], grid, (unsigned)sh.block, args.data());
          drv::check(drv::drv().EventRecord(e1, stream), "autotune event");
          drv::check(drv::drv().EventSynchronize(e1), "autotune event");
          drv::check(drv::drv().EventElapsedTime(&ms, e0, e1), "autotune event");
        } catch (const Error&) {  // a variant the device cannot launch (resources): not a candidate
          continue;
        }
        times[j] = ms / kReps;
      }
      const size_t pick = drv::fastest_keeping_first(times, times.size(), kSlack, true);
      memo = chosen.emplace(std::make_pair(k, sl.sizes), (int)pick).first;
    }
    sl.shape = memo->second;
    sl.grid = p.grid(p.shapes[k][sl.shape], sl.n_outer, two_level);
  }
  drv::drv().EventDestroy(e0);
  drv::drv().EventDestroy(e1);
  drv::check(drv::drv().StreamSynchronize(stream), "autotune");
  int64_t detail = 0;
  drv::take_device_error(p.device, &detail);  // (zeros are valid indices; clear the word anyway)
}

// Distinct (kernel, sizes) launches with variants.
int tunable_launches(const Program& p) {
  std::map<std::pair<int, std::vector<int64_t>>, bool> seen;
  for (size_t i = 0; i < p.static_launches.size(); i++) {
    const lower::Step& s = p.graph.steps[i];
    if (s.kind == lower::Step::Kind::Launch && tunable(p.shapes[s.launch.kernel]))
      seen[{s.launch.kernel, p.static_launches[i].sizes}] = true;
  }
  return (int)seen.size();
}

}  // namespace

void autotune(Program& p, const std::string& code_key, capture::CompileReport& r) {
  if (p.tiny_graph || p.static_launches.empty() || tunable_launches(p) == 0) return;
  // (under a stream capture nothing may run: the planned shapes stay)
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!drv::compile_only()) drv::drv().StreamIsCapturing(drv::current(p.device), &capturing);
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) return;
  auto t0 = std::chrono::steady_clock::now();
  const std::string key = "tc " TC_VERSION " cuda autotune " + std::to_string(kTuneVersion) + " nvrtc " +
                          drv::nvrtc_version() + " device " + drv::device_name(p.device) + "\n" + code_key;
  cpu::CacheRead read;
  std::string text = cpu::cached(key, "cuda-tune", [&] {
    time_variants(p);
    return choices_text(p);
  }, &read);
  const int n = tunable_launches(p);
  if (read == cpu::CacheRead::Hit && !apply_choices(p, text)) {  // a valid entry for another program
    time_variants(p);
    cpu::cache_write(key, choices_text(p), "cuda-tune");
    read = cpu::CacheRead::Miss;
  }
  r.tuned_kernels += n;
  if (read == cpu::CacheRead::Hit) r.tuned_cached += n;
  r.tune_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tc::backends::cuda
