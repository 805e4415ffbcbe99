// The lowering pipeline, top to bottom, with a dump after every stage under TC_DEBUG=2.
#include <cstdio>
#include <cstdlib>

#include "lower_internal.h"
#include "tc/config.h"

namespace tc::lower {

void dedup(LoweredGraph& lg);        // dedup.cpp
void plan_memory(LoweredGraph& lg);  // plan_memory.cpp

static bool dumping(const LowerOptions& o) {
  return o.dump || tc::debug_level() >= 2;
}

// `text` is only built when dumping (before, the 64-layer seed graph was printed 5 times per lowering).
template <typename F>
static void dump(const LowerOptions& o, const char* stage, F text) {
  if (dumping(o)) std::fprintf(stderr, "---- lower: %s ----\n%s", stage, text().c_str());
}

LoweredGraph lower(const capture::Graph& input, const LowerOptions& o) {
  dump(o, "captured graph", [&] { return input.print_code(); });
  std::vector<int> origin;
  capture::Graph g = decompose(input, &origin, o.device);
  dump(o, "decomposed", [&] { return g.print_code(); });
  Shapes shapes = sym_shapes(g);
  LoweredGraph lg;
  Lowering(input, g, shapes, o, lg, origin).run();
  dump(o, "kernels and externs (fused)", [&] { return print(lg); });
  dedup(lg);
  dump(o, "structural dedup", [&] { return print(lg); });
  plan_memory(lg);
  dump(o, "memory plan", [&] { return print(lg); });
  return lg;
}

int count_launches(const LoweredGraph& g) {
  int n = 0;
  for (const Step& s : g.steps) n += s.kind == Step::Kind::Launch;
  return n;
}

int count_externs(const LoweredGraph& g, bool fallbacks_only) {
  int n = 0;
  for (const Step& s : g.steps) n += s.kind == Step::Kind::Extern && (!fallbacks_only || s.ext.fallback);
  return n;
}

std::vector<std::string> fallback_ops(const LoweredGraph& g) {
  std::vector<std::string> out;
  for (const Step& s : g.steps)
    if (s.kind == Step::Kind::Extern && s.ext.fallback) out.push_back(op_name(s.ext.op));
  return out;
}

}  // namespace tc::lower
