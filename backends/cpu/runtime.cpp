// The launch list of a compiled graph (runtime.h).
#include "runtime.h"

#include <algorithm>

#include "lower/launch_list.h"
#include "tc/error.h"
#include "tc/parallel.h"

namespace tc::backends::cpu {

namespace {

constexpr int64_t kMaxParts = 256;

// A two-level kernel: the outer range cut into parts that depend on the sizes only (the result
// does not depend on the thread count), each part's partial results, then _final combines them
// in order and runs the kernel's final code (also without outer iterations: a mean of nothing).
void launch_two_level(const CompiledKernel& k, void* const* buffers, const int64_t* sizes, int64_t outer,
                      int64_t work) {
  outer = std::max<int64_t>(outer, 0);
  const int64_t grain = std::max<int64_t>(1, kParallelWork / work);
  const int64_t parts = std::clamp<int64_t>((outer + grain - 1) / grain, 1, kMaxParts);
  const int64_t per = (outer + parts - 1) / parts;
  const size_t slots = (size_t)k.outer_reductions * kPartialBytes / sizeof(uint64_t);
  std::vector<uint64_t> partials((size_t)parts * slots);
  auto run = [&](int64_t b, int64_t e) {
    std::vector<void*> bufs(buffers, buffers + k.num_buffers);
    bufs.push_back(nullptr);
    for (int64_t p = b; p < e; p++) {
      bufs.back() = &partials[(size_t)p * slots];
      k.fn(bufs.data(), sizes, std::min(outer, p * per), std::min(outer, (p + 1) * per));
    }
  };
  if (parts == 1 || outer * work < kParallelWork || get_num_threads() == 1) run(0, parts);
  else parallel_for(0, parts, 1, run);
  k.final(buffers, sizes, partials.data(), parts);
}

void launch_range(const CompiledKernel& k, void* const* buffers, const int64_t* sizes, int64_t outer, int64_t work) {
  if (k.final) return launch_two_level(k, buffers, sizes, outer, work);
  if (outer <= 0) return;
  if (outer * work < kParallelWork || get_num_threads() == 1) return k.fn(buffers, sizes, 0, outer);
  parallel_for(0, outer, std::max<int64_t>(1, kParallelWork / work),
               [&](int64_t b, int64_t e) { k.fn(buffers, sizes, b, e); });
}

}  // namespace

void launch(const CompiledKernel& k, void* const* buffers, const int64_t* sizes) {
  int64_t info[2] = {0, 1};
  k.info(sizes, info);
  launch_range(k, buffers, sizes, info[0], std::max<int64_t>(1, info[1]));
}

void Program::prepare_static_launches() {
  static_launches.clear();
  if (!graph.symbols.empty()) return;
  const std::vector<int64_t> none;
  static_launches.resize(graph.steps.size());
  for (size_t i = 0; i < graph.steps.size(); i++) {
    const lower::Step& s = graph.steps[i];
    if (s.kind != lower::Step::Kind::Launch) continue;
    StaticLaunch& sl = static_launches[i];
    sl.sizes = lower::eval_all(s.launch.sizes, none);
    int64_t info[2] = {0, 1};
    kernels[s.launch.kernel].info(sl.sizes.data(), info);
    sl.outer = info[0];
    sl.work = std::max<int64_t>(1, info[1]);
  }
}

std::shared_ptr<Storage> Program::arena(int64_t bytes) const {
  bytes = std::max<int64_t>(bytes, 1);  // empty temporaries still need a storage to view
  if (graph.arena_bytes_static < 0) return Storage::allocate((size_t)bytes, Device{});
  std::lock_guard<std::mutex> lock(kept->mu);
  if (kept->storage && kept->storage.use_count() == 1) return kept->storage;
  std::shared_ptr<Storage> s = Storage::allocate((size_t)bytes, Device{});
  if (!kept->storage) kept->storage = s;
  return s;
}

std::vector<Tensor> Program::run(capture::GraphInputs inputs) const {
  const lower::LoweredGraph& g = graph;
  const std::vector<int64_t> syms = lower::symbol_values(g, inputs);
  std::shared_ptr<Storage> arena = this->arena(lower::arena_bytes(g, syms));
  std::vector<lower::Place> places = lower::place_buffers(g, inputs, arena, syms, Device{});
  std::vector<void*> ptrs;
  std::vector<int64_t> sizes;
  for (size_t step = 0; step < g.steps.size(); step++) {
    const lower::Step& s = g.steps[step];
    if (s.kind == lower::Step::Kind::Launch) {
      ptrs.clear();
      for (int b : s.launch.buffers) ptrs.push_back(places[b].ptr);
      if (!static_launches.empty()) {  // sizes and outer range known since compile time
        const StaticLaunch& sl = static_launches[step];
        launch_range(kernels[s.launch.kernel], ptrs.data(), sl.sizes.data(), sl.outer, sl.work);
        continue;
      }
      sizes.clear();
      for (const lower::SymInt& v : s.launch.sizes) sizes.push_back(v.eval(syms));
      launch(kernels[s.launch.kernel], ptrs.data(), sizes.data());
      continue;
    }
    lower::run_extern(g, s.ext, places, syms, "cpu backend", false);
  }
  return lower::graph_outputs(g, places, syms);
}

}  // namespace tc::backends::cpu
