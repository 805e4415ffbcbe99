// The launch list of a compiled graph (runtime.h).
#include "runtime.h"

#include <algorithm>

#include "tc/error.h"
#include "tc/parallel.h"

namespace tc::backends::cpu {

using lower::Buffer;
using lower::BufferView;

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
    for (const lower::SymInt& v : s.launch.sizes) sl.sizes.push_back(v.eval(none));
    int64_t info[2] = {0, 1};
    kernels[s.launch.kernel].info(sl.sizes.data(), info);
    sl.outer = info[0];
    sl.work = std::max<int64_t>(1, info[1]);
  }
}

namespace {

// Where a graph buffer lives during one call: a storage (held by the input, the arena or `own`:
// not copied per buffer, whose reference counts are atomic) and the element offset of its start.
struct Place {
  const std::shared_ptr<Storage>* storage = nullptr;
  std::shared_ptr<Storage> own;  // an unplanned buffer's
  int64_t offset = 0;  // elements
  char* ptr = nullptr;
};

Tensor view_of(const Place& p, DType dtype, const BufferView& v, const std::vector<int64_t>& syms) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = *p.storage;
  impl->offset = p.offset + v.offset.eval(syms);
  for (const lower::SymInt& s : v.sizes) impl->sizes.push_back(s.eval(syms));
  for (const lower::SymInt& s : v.strides) impl->strides.push_back(s.eval(syms));
  impl->dtype = dtype;
  impl->device = (*p.storage)->device();
  return Tensor(std::move(impl));
}

}  // namespace

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
  std::vector<int64_t> syms;
  for (const lower::Symbol& s : g.symbols) syms.push_back(inputs[s.input]->size(s.dim));
  // The arena: planned buffers at their offsets; unplanned ones get their own storage.
  int64_t arena_bytes = g.arena_bytes_static;
  if (arena_bytes < 0) {
    arena_bytes = 0;
    for (const Buffer& b : g.buffers)
      if (b.kind != Buffer::Kind::Input && b.offset >= 0)
        arena_bytes = std::max<int64_t>(arena_bytes, b.offset + b.numel.eval(syms) * (int64_t)itemsize(b.dtype));
  }
  std::shared_ptr<Storage> arena = this->arena(arena_bytes);
  std::vector<Place> places(g.buffers.size());
  for (size_t i = 0; i < g.buffers.size(); i++) {
    const Buffer& b = g.buffers[i];
    Place& p = places[i];
    const int64_t item = (int64_t)itemsize(b.dtype);
    if (b.kind == Buffer::Kind::Input) {
      const Tensor& t = *inputs[b.io];
      p.storage = &t.storage();
      p.offset = t.offset();
      p.ptr = static_cast<char*>(t.data_ptr());
    } else if (b.offset >= 0) {
      TC_ASSERT(b.offset % item == 0, "memory plan: a buffer's arena offset is not aligned to its dtype");
      p.storage = &arena;
      p.offset = b.offset / item;
      p.ptr = static_cast<char*>(arena->data()) + b.offset;
    } else {
      p.own = Storage::allocate((size_t)std::max<int64_t>(1, b.numel.eval(syms)) * item, Device{});
      p.storage = &p.own;
      p.ptr = static_cast<char*>(p.own->data());
    }
  }
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
    const lower::Extern& e = s.ext;
    std::vector<Tensor> ins;
    for (const BufferView& v : e.inputs) ins.push_back(view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms));
    Stack args = lower::extern_args(e, ins);
    std::vector<Tensor> out;
    try {
      if (e.external) {
        out = e.external->call(args);
      } else {
        for (const Value& v : call(e.op, args)) out.push_back(v.tensor());
      }
    } catch (const capture::NodeError&) {
      throw;
    } catch (const Error& err) {
      if (e.node < 0) throw;
      throw capture::NodeError(err, e.node);  // capture names the node's user line
    }
    const char* what = e.external ? e.external->name.c_str() : op_name(e.op);
    TC_CHECK(out.size() == 1 + e.more_outputs.size(), CompileError, "cpu backend: %s gave %zu results", what,
             out.size());
    for (size_t i = 0; i < out.size(); i++) {
      const BufferView& v = i == 0 ? e.output : e.more_outputs[i - 1];
      Tensor dst = view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms);
      // An in-place op returns the view it wrote, which is already the output.
      if (out[i].storage() == dst.storage() && out[i].offset() == dst.offset() && out[i].sizes() == dst.sizes() &&
          out[i].strides() == dst.strides())
        continue;
      dst.copy_from(out[i]);
    }
  }
  std::vector<Tensor> outs;
  outs.reserve(g.outputs.size());
  for (const BufferView& v : g.outputs) outs.push_back(view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms));
  return outs;
}

}  // namespace tc::backends::cpu
