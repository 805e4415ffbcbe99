// The static memory plan: every Temp buffer of static size gets a byte offset in one arena, by
// liveness over the launch order; buffers are placed in decreasing size at the lowest offset
// that no buffer live at the same time overlaps (XLA's decreasing-size best fit, simplified).
// Temps of dynamic size keep offset -1 (the runner allocates them); outputs are never planned.
#include <algorithm>

#include "lower_internal.h"

namespace tc::lower {

void plan_memory(LoweredGraph& lg) {
  const int nb = int(lg.buffers.size());
  std::vector<int> first(nb, -1), last(nb, -1);
  auto touch = [&](int b, int step) {
    if (first[b] < 0) first[b] = step;
    last[b] = step;
  };
  for (int s = 0; s < int(lg.steps.size()); s++) {
    const Step& st = lg.steps[s];
    if (st.kind == Step::Kind::Launch) {
      for (int b : st.launch.buffers) touch(b, s);
    } else {
      for (const BufferView& v : st.ext.inputs) touch(v.buffer, s);
      touch(st.ext.output.buffer, s);
      for (const BufferView& v : st.ext.more_outputs) touch(v.buffer, s);
    }
  }
  struct Item {
    int buffer;
    int64_t bytes;
  };
  std::vector<Item> items;
  for (int b = 0; b < nb; b++) {
    Buffer& buf = lg.buffers[b];
    buf.offset = -1;
    if (buf.kind != Buffer::Kind::Temp || !buf.numel.is_const() || first[b] < 0) continue;
    int64_t bytes = (buf.numel.const_value() * int64_t(itemsize(buf.dtype)) + 63) / 64 * 64;
    items.push_back({b, std::max<int64_t>(bytes, 64)});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
  std::vector<Item> placed;
  int64_t arena = 0;
  for (const Item& it : items) {
    std::vector<std::pair<int64_t, int64_t>> busy;  // [start, end) of overlapping live buffers
    for (const Item& p : placed)
      if (!(last[p.buffer] < first[it.buffer] || last[it.buffer] < first[p.buffer]))
        busy.push_back({lg.buffers[p.buffer].offset, lg.buffers[p.buffer].offset + p.bytes});
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds the buffer, else the end.
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (auto [s, e] : busy) {
      if (s - at >= it.bytes && s - at < best_gap) {
        best = at;
        best_gap = s - at;
      }
      at = std::max(at, e);
    }
    if (best < 0) best = at;
    lg.buffers[it.buffer].offset = best;
    arena = std::max(arena, best + it.bytes);
    placed.push_back(it);
  }
  lg.arena_bytes_static = arena;
}

}  // namespace tc::lower
