// Buffers, extern steps and outputs of a compiled launch list (launch_list.h).
#include "launch_list.h"

#include <algorithm>

#include "tc/error.h"

namespace tc::lower {

std::vector<int64_t> symbol_values(const LoweredGraph& g, capture::GraphInputs inputs) {
  std::vector<int64_t> syms;
  for (const Symbol& s : g.symbols) syms.push_back(inputs[s.input]->size(s.dim));
  return syms;
}

bool ties_hold(const LoweredGraph& g, capture::GraphInputs inputs) {
  for (const TiedDim& t : g.tied) {
    const Symbol& s = g.symbols[size_t(t.symbol)];
    if (inputs[t.input]->size(t.dim) != inputs[s.input]->size(s.dim)) return false;
  }
  return true;
}

int64_t arena_bytes(const LoweredGraph& g, const std::vector<int64_t>& syms) {
  if (g.arena_bytes_static >= 0) return g.arena_bytes_static;
  int64_t bytes = 0;
  for (const Buffer& b : g.buffers)
    if (b.kind != Buffer::Kind::Input && b.offset >= 0) {
      int64_t end, numel = b.numel.eval(syms);  // checked: ShapeError past int64, as eager
      TC_CHECK(!__builtin_mul_overflow(numel, (int64_t)itemsize(b.dtype), &end) &&
                   !__builtin_add_overflow(end, b.offset, &end),
               OutOfMemoryError, "out of memory: a compiled graph's %s buffer of %lld elements needs more bytes than any "
               "address space (the byte count overflows int64)", dtype_name(b.dtype), (long long)numel);
      bytes = std::max<int64_t>(bytes, end);
    }
  return bytes;
}

std::vector<Place> place_buffers(const LoweredGraph& g, capture::GraphInputs inputs,
                                 const std::shared_ptr<Storage>& arena, const std::vector<int64_t>& syms,
                                 Device device) {
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
      p.own = Storage::allocate((size_t)std::max<int64_t>(1, b.numel.eval(syms)) * item, device);
      p.storage = &p.own;
      p.ptr = static_cast<char*>(p.own->data());
    }
  }
  return places;
}

Tensor view_of(const Place& p, DType dtype, const BufferView& v, const std::vector<int64_t>& syms) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = *p.storage;
  impl->offset = p.offset + v.offset.eval(syms);
  for (const SymInt& s : v.sizes) impl->sizes.push_back(s.eval(syms));
  for (const SymInt& s : v.strides) impl->strides.push_back(s.eval(syms));
  impl->dtype = dtype;
  impl->device = (*p.storage)->device();
  return Tensor(std::move(impl));
}

namespace {

// Whether `t`'s elements fill numel() consecutive elements from its offset (in any dim order).
bool dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims of size > 1
  for (int64_t d = 0; d < t.dim(); d++)
    if (t.size(d) != 1) dims.push_back({t.strides()[d], t.size(d)});
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (auto [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

// Whether an extern's result `t` can stand for the whole buffer that view `v` writes: a Temp or
// Output buffer written entirely in its dtype, with the view's strides (contiguous, or the
// channels-last layout of LowerOptions::channels_last_call), densely.
bool rebindable(const LoweredGraph& g, const BufferView& v, const Tensor& t, const std::vector<int64_t>& syms) {
  const Buffer& b = g.buffers[v.buffer];
  if (b.kind == Buffer::Kind::Input || t.dtype() != b.dtype || !dense(t) ||
      v.offset.eval(syms) != 0)
    return false;
  if (t.numel() != b.numel.eval(syms) || (int64_t)v.sizes.size() != t.dim()) return false;
  for (size_t d = 0; d < v.sizes.size(); d++) {
    const int64_t n = v.sizes[d].eval(syms);
    if (n != t.size((int64_t)d) || (n > 1 && v.strides[d].eval(syms) != t.strides()[d]))
      return false;
  }
  return t.storage() != nullptr;
}

}  // namespace

void run_extern(const LoweredGraph& g, const Extern& e, std::vector<Place>& places, const std::vector<int64_t>& syms,
                const char* backend, bool rebind) {
  std::vector<Tensor> ins;
  for (const BufferView& v : e.inputs) ins.push_back(view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms));
  Stack args = extern_args(e, ins);
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
  TC_CHECK(out.size() == 1 + e.more_outputs.size(), CompileError, "%s: %s gave %zu results", backend, what,
           out.size());
  for (size_t i = 0; i < out.size(); i++) {
    const BufferView& v = i == 0 ? e.output : e.more_outputs[i - 1];
    Place& place = places[v.buffer];
    if (rebind && rebindable(g, v, out[i], syms) &&
        std::none_of(places.begin(), places.end(), [&](const Place& q) { return *q.storage == out[i].storage(); })) {
      place.own = out[i].storage();
      place.storage = &place.own;
      place.offset = out[i].offset();
      place.ptr = static_cast<char*>(out[i].data_ptr());
      continue;
    }
    Tensor dst = view_of(place, g.buffers[v.buffer].dtype, v, syms);
    // An in-place op returns the view it wrote, which is already the output.
    if (out[i].storage() == dst.storage() && out[i].offset() == dst.offset() && out[i].sizes() == dst.sizes() &&
        out[i].strides() == dst.strides())
      continue;
    dst.copy_from(out[i]);
  }
}

std::vector<Tensor> graph_outputs(const LoweredGraph& g, const std::vector<Place>& places,
                                  const std::vector<int64_t>& syms) {
  std::vector<Tensor> outs;
  outs.reserve(g.outputs.size());
  for (const BufferView& v : g.outputs) outs.push_back(view_of(places[v.buffer], g.buffers[v.buffer].dtype, v, syms));
  return outs;
}

}  // namespace tc::lower
