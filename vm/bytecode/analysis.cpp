// CFG, liveness, to-be-closed and open-upvalue dataflow, resume points and capture conflicts.
#include "analysis.h"

#include <deque>

namespace tc::vm {
namespace {

RegSet at_or_above(int first) {
  RegSet s;
  for (int r = first; r < 256; r++) s.set(r);
  return s;
}

// Forward "may" dataflow from pc 0: `transfer` maps the set before an instruction to the set after.
template <typename Transfer>
std::vector<RegSet> forward(const Proto& f, const Analysis& a, Transfer transfer) {
  const int n = int(f.code.size());
  std::vector<RegSet> in(n);
  std::vector<bool> queued(n, true);
  std::deque<int> work;
  for (int pc = 0; pc < n; pc++) work.push_back(pc);  // every transfer runs at least once
  while (!work.empty()) {
    int pc = work.front();
    work.pop_front();
    queued[pc] = false;
    RegSet out = transfer(pc, in[pc]);
    for (int s : a.succ[pc]) {
      RegSet merged = in[s] | out;
      if (merged == in[s]) continue;
      in[s] = merged;
      if (!queued[s]) work.push_back(s), queued[s] = true;
    }
  }
  return in;
}

void compute_liveness(const Proto& f, Analysis& a) {
  const int n = int(f.code.size());
  const int frame = f.maxstacksize;
  std::vector<RegSet> use(n), kill(n);
  for (int pc = 0; pc < n; pc++) {
    Effects e = effects(f, pc);
    for (int i = 0; i < e.nreads; i++) use[pc] |= to_set(e.reads[i], frame);
    use[pc] |= e.captures;
    if (!e.may_write)
      for (int i = 0; i < e.nwrites; i++)
        kill[pc] |= e.writes[i].count == kOpenCount ? at_or_above(e.writes[i].first)
                                                    : to_set(e.writes[i], frame);
    const Ins ins = decode(f.code[pc]);
    if (ins.op == OpCode::CLOSE) use[pc] |= a.tbc[pc] & at_or_above(ins.a);
    if (ins.op == OpCode::RETURN) use[pc] |= a.tbc[pc];
  }
  a.live.assign(n, RegSet());
  std::vector<bool> queued(n, true);
  std::deque<int> work;
  for (int pc = n - 1; pc >= 0; pc--) work.push_back(pc);
  while (!work.empty()) {
    int pc = work.front();
    work.pop_front();
    queued[pc] = false;
    RegSet out;
    for (int s : a.succ[pc]) out |= a.live[s];
    RegSet in = use[pc] | (out & ~kill[pc]);
    if (in == a.live[pc]) continue;
    a.live[pc] = in;
    for (int p : a.pred[pc])
      if (!queued[p]) work.push_back(p), queued[p] = true;
  }
}

// True when proto g (or a closure nested in it) may assign its upvalue j.
bool writes_upvalue(const Proto& g, int j) {
  for (uint32_t w : g.code) {
    Ins i = decode(w);
    if (i.op == OpCode::SETUPVAL && i.b == j) return true;
  }
  for (const Proto& child : g.protos)
    for (size_t u = 0; u < child.upvalues.size(); u++)
      if (!child.upvalues[u].instack && child.upvalues[u].idx == j && writes_upvalue(child, int(u)))
        return true;
  return false;
}

std::string describe_register(const Proto& f, int r, int pc) {
  std::string name = local_name(f, r, pc);
  return "register " + std::to_string(r) + (name.empty() ? "" : " (local '" + name + "')");
}

}  // namespace

Analysis analyze(const Proto& f) {
  const int n = int(f.code.size());
  Analysis a;
  a.succ.resize(n);
  a.pred.resize(n);
  for (int pc = 0; pc < n; pc++) {
    Successors s = successors(f, pc);
    for (int i = 0; i < s.n; i++)
      if (s.pc[i] >= 0 && s.pc[i] < n) {
        a.succ[pc].push_back(s.pc[i]);
        a.pred[s.pc[i]].push_back(pc);
      }
  }
  a.reachable.assign(n, false);
  std::deque<int> work;
  if (n > 0) work.push_back(0), a.reachable[0] = true;
  while (!work.empty()) {
    int pc = work.front();
    work.pop_front();
    for (int s : a.succ[pc])
      if (!a.reachable[s]) a.reachable[s] = true, work.push_back(s);
  }
  a.tbc = forward(f, a, [&](int pc, RegSet s) {
    const Ins i = decode(f.code[pc]);
    if (i.op == OpCode::TBC) s.set(i.a);
    if (i.op == OpCode::TFORPREP && i.a + 3 < 256) s.set(i.a + 3);
    if (i.op == OpCode::CLOSE) s &= ~at_or_above(i.a);
    return s;
  });
  a.captured = forward(f, a, [&](int pc, RegSet s) {
    const Ins i = decode(f.code[pc]);
    if (i.op == OpCode::CLOSURE) s |= effects(f, pc).captures;
    if (i.op == OpCode::CLOSE) s &= ~at_or_above(i.a);
    return s;
  });
  compute_liveness(f, a);
  return a;
}

ResumePoint resume_point_at(const Proto& f, int pc) {
  ResumePoint none{-1, false, 0};
  if (pc < 0 || pc >= int(f.code.size())) return none;
  const Ins i = decode(f.code[pc]);
  if (i.info().mm || i.op == OpCode::EXTRAARG || i.op == OpCode::VARARGPREP) return none;
  if (pc > 0 && decode(f.code[pc - 1]).info().test) return none;
  ResumePoint p{pc, false, 0};
  if (reads_open_top(i)) {
    p.open_results = true;
    p.open_base = i.op == OpCode::RETURN ? i.a : i.a + 1;
  }
  return p;
}

std::vector<ResumePoint> resume_points(const Proto& f) {
  std::vector<ResumePoint> points;
  for (int pc = 0; pc < int(f.code.size()); pc++) {
    ResumePoint p = resume_point_at(f, pc);
    if (p.pc >= 0) points.push_back(p);
  }
  return points;
}

std::string capture_conflict(const Proto& f, const Analysis& a, int start) {
  const int n = int(f.code.size());
  if (a.captured[start].none()) return "";
  RegSet written_by_closure;
  for (uint32_t w : f.code) {
    Ins i = decode(w);
    if (i.op != OpCode::CLOSURE || i.bx >= int(f.protos.size())) continue;
    const Proto& child = f.protos[i.bx];
    for (size_t u = 0; u < child.upvalues.size(); u++)
      if (child.upvalues[u].instack && writes_upvalue(child, int(u)))
        written_by_closure.set(child.upvalues[u].idx);
  }
  std::vector<RegSet> seen(n);
  std::deque<std::pair<int, RegSet>> work{{start, a.captured[start]}};
  seen[start] = a.captured[start];
  while (!work.empty()) {
    auto [pc, open] = work.front();
    work.pop_front();
    Effects e = effects(f, pc);
    RegSet read = e.captures;
    for (int i = 0; i < e.nreads; i++) read |= to_set(e.reads[i], f.maxstacksize);
    RegSet written;
    for (int i = 0; i < e.nwrites; i++) written |= to_set(e.writes[i], f.maxstacksize);
    for (int r = 0; r < 256; r++) {
      if (!open.test(r)) continue;
      if (written.test(r))
        return describe_register(f, r, start) + " is shared with a closure and assigned at pc " +
               std::to_string(pc + 1) + " after the resume point";
      if (read.test(r) && written_by_closure.test(r))
        return describe_register(f, r, start) + " is shared with a closure that assigns it, and read at pc " +
               std::to_string(pc + 1) + " after the resume point";
    }
    const Ins i = decode(f.code[pc]);
    if (i.op == OpCode::CLOSE) open &= ~at_or_above(i.a);
    for (int s : a.succ[pc]) {
      RegSet fresh = open & ~seen[s];
      if (fresh.none()) continue;
      seen[s] |= fresh;
      work.push_back({s, fresh});
    }
  }
  return "";
}

}  // namespace tc::vm
