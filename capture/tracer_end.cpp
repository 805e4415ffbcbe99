// The start and end of a trace: the root frame from the real arguments, and what the entry keeps
// at a return or a break (graph outputs, value plans, side effects, the registers to rebuild).
#include <fstream>

#include "capture_state.h"
#include "lua_binding.h"
#include "resume.h"
#include "tc/config.h"
#include "tied_dims.h"
#include "tracer.h"

namespace tc::capture {

Tracer::Tracer(lua_State* L, const vm::Proto* root, const vm::Analysis& analysis, int fn_idx,
               int nargs, Entry& e, Options opt)
    : L(L),
      root_(root),
      an_(analysis),
      fn_idx_(fn_idx),
      args_idx_(fn_idx + 1),
      nargs_(nargs),
      e_(e),
      opt_(std::move(opt)) {}

// What the trace's own records hold, estimated from their sizes (cheap, and the same on every
// machine): guards, sources, graph nodes, model tables, frames, effects, writes, and the Lua
// heap it grew (K, the object table, replays). glibc's mallinfo2 would count exactly, but walks
// every free chunk: on a fragmented heap it cost a third of the tracing time.
size_t Tracer::held_bytes() const {
  constexpr size_t kNodeBytes = 512;  // a graph node with its fake tensors and arguments
  constexpr size_t kMapEntry = 64;    // a hash map's node and bucket
  size_t n = e_.guards.guards.capacity() * sizeof(Guard) +
             e_.guards.sources.capacity() * (sizeof(Source) + kMapEntry) +
             e_.graph.nodes.size() * kNodeBytes;
  for (const Guard& g : e_.guards.guards) n += g.expected.size();
  n += e_.guards.aliases.capacity() * sizeof(AliasMember);
  for (const Source& s : e_.guards.sources) n += s.name.size();
  for (const ModelTable& t : tables_)
    n += sizeof(ModelTable) +
         (t.array.capacity() + 2 * t.hash.capacity() + t.log.capacity()) * sizeof(Var);
  for (const Frame& f : frames_) n += sizeof(Frame) + (f.R.capacity() + f.va.capacity()) * sizeof(Var);
  n += effects_.capacity() * sizeof(PendingEffect) + overlay_.size() * (sizeof(Var) + kMapEntry) +
       by_source_.capacity() * sizeof(std::optional<Var>) + table_sources_.capacity() * 8 +
       (cells_.capacity() + upval_overlay_.size() + grad_overlay_.size()) * sizeof(Var);
  const size_t lua_kb = size_t(lua_gc(L, LUA_GCCOUNT, 0));
  if (lua_kb > lua_kb_at_start_) n += (lua_kb - lua_kb_at_start_) << 10;
  return n;
}

void Tracer::check_cost() {
  const TraceBudget& b = opt_.budget;
  if (int(e_.guards.guards.size()) > b.guards)
    throw TraceLimit("the trace made more than " + std::to_string(b.guards) +
                     " guards (tc.config.trace_max_guards)");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - started_).count();
  if (ms > b.ms)
    throw TraceLimit("the trace took more than " + std::to_string(b.ms) +
                     " ms (tc.config.trace_max_ms)");
  if (held_bytes() > size_t(b.memory_mb) << 20)
    throw TraceLimit("the trace held more than " + std::to_string(b.memory_mb) +
                     " MB (tc.config.trace_max_memory_mb)");
}

// The test hook for failures of tc's own: TC_TEST_TRACE_FAILURE=bad_alloc makes every trace
// run out of memory, any other value fail as a bug would (a std::logic_error), so that tests
// see what dispatch's give_up_compiling makes of them.
static void inject_failure() {
  static const char* what = std::getenv("TC_TEST_TRACE_FAILURE");
  if (!what || !*what) return;
  if (std::string_view(what) == "bad_alloc") throw std::bad_alloc();
  throw std::logic_error(std::string("injected by TC_TEST_TRACE_FAILURE=") + what);
}

void Tracer::run() {
  started_ = std::chrono::steady_clock::now();
  lua_kb_at_start_ = size_t(lua_gc(L, LUA_GCCOUNT, 0));
  inject_failure();
  lua_checkstack(L, 64);
  const int base = lua_gettop(L);
  // sized for a small trace (one layer: about 20 objects, 70 constants) to spare the rehashes
  lua_createtable(L, 32, 0);
  objs_ = lua_gettop(L);
  lua_createtable(L, 64, 0);
  K_ = lua_gettop(L);
  e_.guards.guards.reserve(64);
  e_.guards.sources.reserve(64);
  struct Restore {
    lua_State* L;
    int top;
    ~Restore() { lua_settop(L, top); }
  } restore{L, base};
  struct RestoreGradMode {  // tc.set_grad_enabled in the trace changes it (call_builtin)
    bool on;
    ~RestoreGradMode() { lua::set_grad_enabled(on); }
  } restore_grad{lua::grad_enabled()};

  GlobalStateSpec& gs = e_.guards.global;
  gs.grad = lua::grad_enabled();
  gs.default_dtype = default_dtype();
  gs.default_device = default_device();
  gs.matmul_precision = float32_matmul_precision();
  e_.guards.guards.push_back(Guard(GuardKind::GlobalState));
  e_.guards.guards.back().expected = std::string("grad ") + (gs.grad ? "on" : "off") +
                                     ", default dtype " + dtype_name(gs.default_dtype) +
                                     ", default device " + gs.default_device.str() +
                                     ", matmul precision " + gs.matmul_precision;

  if (root_->is_vararg) {
    Guard ac{GuardKind::ArgCount};
    ac.ival = nargs_;
    ac.expected = std::to_string(nargs_) + " arguments";
    e_.guards.guards.push_back(ac);
  }
  Var fn;
  fn.k = Var::K::Object;
  fn.obj = add_obj(fn_idx_);
  fn.src = e_.guards.source(SrcKind::Fn, -1, 0);
  std::vector<Var> args;
  // parameters not passed are read too (nil, guarded): a later call passing them must miss
  for (int j = 1; j <= std::max<int>(nargs_, root_->numparams); j++)
    args.push_back(read_source(e_.guards.source(SrcKind::Arg, -1, j)));
  push_frame(fn, root_, std::move(args), 0, -1);
  frames_.back().name = opt_.fn_name;
  try {
    while (!frames_.empty()) step();
  } catch (const BreakSignal& b) {
    if (!frames_.front().tbc.empty()) {  // inside a <close> scope of the root: break at its TBC
      GraphBreak brk{BreakCode::ToBeClosed, "a graph break inside its scope: " + b.detail, user_stack()};
      lua_pushvalue(L, K_);
      e_.guards.k_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      throw RestartAt{frames_.front().tbc.front().pc, brk};
    }
    if (frames_.size() > 1) {
      GraphBreak brk{b.code, b.detail, user_stack()};
      lua_pushvalue(L, K_);  // the guards stay valid for a fallback entry made of this attempt
      e_.guards.k_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      throw RestartAt{frames_.front().cur, brk};
    }
    finish_break(b);
  }
  if (!marked_dims_.empty()) check_marked_dims(e_, marked_dims_, marked_names_);
  if (opt_.dynamic_all) specialize_tied_dims(e_);
  e_.guards.simplify();
  check_cost();  // the end adds guards too (aliasing)
  Stats& stats = state().stats;
  stats.max_guards = std::max<int64_t>(stats.max_guards, int64_t(e_.guards.guards.size()));
  e_.guards.end_building();
  lua_pushvalue(L, K_);
  e_.guards.k_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

static std::string source_line(const std::string& file, int line) {
  static std::unordered_map<std::string, std::vector<std::string>> files;
  auto it = files.find(file);
  if (it == files.end()) {
    std::vector<std::string> lines;
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    it = files.emplace(file, std::move(lines)).first;
  }
  if (line < 1 || line > int(it->second.size())) return "";
  std::string s = it->second[line - 1];
  size_t b = s.find_first_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b);
}

std::vector<StackFrame> Tracer::user_stack() const {
  std::vector<StackFrame> out;
  for (const Frame& f : frames_) {
    StackFrame s;
    std::string src = f.p->source.value_or("?");
    s.file = !src.empty() && (src[0] == '@' || src[0] == '=') ? src.substr(1) : src;
    s.line = f.cur < int(f.lines->size()) ? (*f.lines)[f.cur] : f.p->linedefined;
    s.function = !f.name.empty()
                     ? f.name
                     : "function <" + s.file + ":" + std::to_string(f.p->linedefined) + ">";
    if (!src.empty() && src[0] == '@') s.source_line = source_line(s.file, s.line);
    out.push_back(s);
  }
  return out;
}

Ref Tracer::output(Ref r) {
  for (size_t j = 0; j < e_.graph.outputs.size(); j++)
    if (e_.graph.outputs[j] == r) return {int(j), 0, 0};
  e_.graph.outputs.push_back(r);
  return {int(e_.graph.outputs.size()) - 1, 0, 0};
}

struct FallbackSignal {
  std::string reason;
};

VPlan Tracer::plan(const Var& v) {
  VPlan p;
  switch (v.k) {
    case Var::K::Nil:
      p.kind = VPlan::Kind::Nil;
      break;
    case Var::K::Bool:
      p.kind = VPlan::Kind::Bool;
      p.b = v.b;
      break;
    case Var::K::Int:
      p.kind = VPlan::Kind::Int;
      p.i = v.i;
      break;
    case Var::K::Float:
      p.kind = VPlan::Kind::Float;
      p.f = v.f;
      break;
    case Var::K::Str:
      p.kind = VPlan::Kind::Str;
      p.s = v.s;
      break;
    case Var::K::Tensor:
      if (v.input >= 0) {
        p.kind = VPlan::Kind::Source;
        p.i = v.src;
      } else {
        p.kind = VPlan::Kind::Output;
        p.i = output(v.ref).node;
      }
      break;
    case Var::K::Object:
      p.kind = VPlan::Kind::Source;
      p.i = v.src;
      break;
    case Var::K::Table: {
      // tables made in the trace: one TablePlan each for the whole entry, so that references
      // from several registers, results and effects stay one table (o and the argument of
      // o:init() at a break)
      auto it = table_plans_.find(v.id);
      int idx;
      if (it != table_plans_.end()) {
        idx = it->second;
      } else {
        idx = int(e_.tables.size());
        e_.tables.push_back({});
        table_plans_[v.id] = idx;
        const ModelTable& m = tables_[v.id];
        TablePlan tp;
        for (const Var& x : m.array) tp.array.push_back(plan(x));
        for (auto& [k, x] : m.hash) tp.hash.push_back({plan(k), plan(x)});
        e_.tables[idx] = std::move(tp);
        if (m.metatable) {
          VPlan mp = plan(*m.metatable);
          e_.tables[idx].metatable = mp;
        }
      }
      p.kind = tables_[v.id].is_size ? VPlan::Kind::Size : VPlan::Kind::Table;
      p.i = idx;
      break;
    }
    case Var::K::Closure: {
      p.kind = VPlan::Kind::Closure;
      auto it = closure_plans_.find(v.id);
      if (it != closure_plans_.end()) {
        p.i = it->second;
        break;
      }
      const int idx = int(e_.closures.size());
      e_.closures.push_back({});
      closure_plans_[v.id] = idx;  // before the upvalues: a closure may capture itself
      const SymClosure& c = closures_[v.id];
      ClosurePlan cp;
      cp.chunk = vm::write_chunk(*c.p);
      cp.source = c.p->source.value_or("=?");
      for (int cell : c.cells) {
        ClosurePlan::Up u;
        if (cell < 0) {
          auto rc = real_cells_.find(cell);
          if (rc == real_cells_.end() || rc->second.first.k != Var::K::Object ||
              rc->second.first.src < 0)
            throw FallbackSignal{"a function made in the compiled code captures an upvalue of a "
                                 "function tc cannot name"};
          u.fn = plan(rc->second.first);
          u.fn_up = rc->second.second + 1;
        } else {
          u.cell = cell;
          u.value = plan(cells_[cell]);
        }
        cp.ups.push_back(std::move(u));
      }
      e_.closures[idx] = std::move(cp);
      p.i = idx;
      break;
    }
  }
  return p;
}

static void plan_effects(Tracer* t, Entry& e, const auto& effects, auto plan) {
  for (const auto& pe : effects) {
    Effect ef{pe.kind, plan(pe.target), pe.kind == Effect::Kind::RawSet ? plan(pe.key) : VPlan{},
              pe.upval, plan(pe.value)};
    e.effects.push_back(std::move(ef));
  }
}

void Tracer::guard_aliasing() {
  // A write to a table is seen by reads through any alias of it; the trace followed the
  // aliasing it saw, so it holds only while written tables alias exactly the same sources: one
  // Aliasing guard over every table read, its class the object it was.
  std::unordered_set<int> written;  // sources
  for (const PendingEffect& pe : effects_)
    if (pe.kind == Effect::Kind::RawSet && pe.target.k == Var::K::Object && pe.target.src >= 0)
      written.insert(pe.target.src);
  if (written.empty()) return;
  std::vector<AliasMember> members;
  std::unordered_map<int, int> cls;  // object -> class
  std::unordered_set<int> seen;      // sources
  auto add = [&](int src, int obj) {
    if (!seen.insert(src).second) return;
    const int c = cls.emplace(obj, int(cls.size())).first->second;
    members.push_back({src, c, written.count(src) > 0});
  };
  for (const PendingEffect& pe : effects_)
    if (pe.kind == Effect::Kind::RawSet && pe.target.k == Var::K::Object && pe.target.src >= 0)
      add(pe.target.src, pe.target.obj);
  for (auto& [src, obj] : table_sources_) add(src, obj);
  if (members.size() < 2) return;
  e_.guards.aliases = std::move(members);
  e_.guards.guards.push_back(Guard(GuardKind::Aliasing));
}

void Tracer::finish_return(std::vector<Var> results) {
  guard_aliasing();
  try {
    e_.end = EndKind::Return;
    for (const Var& v : results) e_.returns.push_back(plan(v));
    plan_effects(this, e_, effects_, [&](const Var& v) { return plan(v); });
  } catch (const FallbackSignal& f) {
    make_fallback(e_, f.reason);
  }
}

int Tracer::user_line(std::string* file) const {
  for (size_t j = frames_.size(); j-- > 0;) {
    const Frame& f = frames_[j];
    if (f.tc_code && j > 0) continue;
    *file = *f.chunk;
    return f.cur < int(f.lines->size()) ? (*f.lines)[f.cur] : -1;
  }
  return -1;
}

// Arithmetic on strings (Lua converts them through the string metatable's metamethods, which
// the trace does not guard) runs at the break, as a call does, and the trace resumes after it
// (and after its MMBIN). Only where it cannot raise: both operands numbers or strings that
// convert, and the operation succeeds on them now (no integer division by zero, no bitwise on
// a fraction). Anything else runs the rest of the frame in stock Lua, which raises as Lua does.
bool Tracer::arith_at_break(Frame& f, const vm::Ins& i) {
  const int op = arith_op(i.op);
  if (op < 0) return false;
  Var a, b;
  switch (i.op) {
    case vm::OpCode::ADDI:
    case vm::OpCode::SHRI:
      a = reg(f, i.b), b = Var::integer(i.sc());
      break;
    case vm::OpCode::SHLI:
      a = Var::integer(i.sc()), b = reg(f, i.b);
      break;
    case vm::OpCode::UNM:
    case vm::OpCode::BNOT:
      a = b = reg(f, i.b);
      break;
    default:
      a = reg(f, i.b);
      b = i.op >= vm::OpCode::ADDK && i.op <= vm::OpCode::BXORK ? konst(f, i.c) : reg(f, i.c);
  }
  for (const Var* v : {&a, &b}) {
    if (v->k == Var::K::Str && lua_stringtonumber(L, v->s.c_str()) == v->s.size() + 1) {
      lua_pop(L, 1);
      continue;
    }
    if (!v->is_number()) return false;
  }
  const int top = lua_gettop(L);
  lua_pushcfunction(L, [](lua_State* L) {
    lua_arith(L, int(lua_tointeger(L, 1)));
    return 1;
  });
  lua_pushinteger(L, op);
  push_var(a);
  if (op != LUA_OPUNM && op != LUA_OPBNOT) push_var(b);
  const bool ok = lua_pcall(L, lua_gettop(L) - top - 1, 1, 0) == LUA_OK;
  lua_settop(L, top);
  return ok;
}

void Tracer::finish_break(const BreakSignal& b) {
  guard_aliasing();
  Frame& f = frames_.back();
  const int pc = f.cur;
  e_.brk = opt_.forced_break_pc == pc && !opt_.forced.stack.empty()
               ? opt_.forced
               : GraphBreak{b.code, b.detail, user_stack()};
  e_.pc = pc;
  e_.end = EndKind::Break;
  const vm::Ins i = vm::decode(root_->code[pc]);
  auto fallback = [&](const std::string& why) { make_fallback(e_, why); };
  if (i.op == vm::OpCode::CALL || i.op == vm::OpCode::TAILCALL)
    e_.callee_kind = object_kind(*root_, pc, i.a, &e_.callee_name);
  switch (i.op) {
    case vm::OpCode::CALL:
      e_.resume_pcs = {pc + 1};
      break;
    case vm::OpCode::TAILCALL:
      break;
    case vm::OpCode::EQ:
    case vm::OpCode::LT:
    case vm::OpCode::LE:
    case vm::OpCode::EQK:
    case vm::OpCode::EQI:
    case vm::OpCode::LTI:
    case vm::OpCode::LEI:
    case vm::OpCode::GTI:
    case vm::OpCode::GEI:
    case vm::OpCode::TEST:
    case vm::OpCode::TESTSET: {
      const vm::Ins j = vm::decode(root_->code[pc + 1]);
      e_.resume_pcs = {pc + 2, pc + 2 + j.sj};
      break;
    }
    case vm::OpCode::GETTABUP:
    case vm::OpCode::GETTABLE:
    case vm::OpCode::GETI:
    case vm::OpCode::GETFIELD:
    case vm::OpCode::SELF:
    case vm::OpCode::SETTABUP:
    case vm::OpCode::SETTABLE:
    case vm::OpCode::SETI:
    case vm::OpCode::SETFIELD:
      // run at the break (a metamethod function through the compiler), then resumed compiled after
      // it; or, where Lua would raise, by the resume function at pc in stock Lua (run_break)
      if (vm::plan_resume(*root_, an_, pc + 1).ok()) {
        e_.index_at_break = true;
        e_.resume_pcs = {pc + 1, pc};
        break;
      }
      e_.resume_uncompiled = true;
      e_.resume_pcs = {pc};
      break;
    default:
      if (arith_at_break(f, i)) {
        e_.arith = arith_op(i.op);
        e_.resume_pcs = {pc + (i.op == vm::OpCode::UNM || i.op == vm::OpCode::BNOT ? 1 : 2)};
        break;
      }
      e_.resume_uncompiled = true;
      e_.resume_pcs = {pc};
      break;
  }
  for (int p : e_.resume_pcs) {
    vm::ResumePlan rp = vm::plan_resume(*root_, an_, p);
    if (!rp.ok()) return fallback("cannot resume after the break: " + rp.refusal);
  }
  try {
    vm::RegSet live = an_.live[pc];
    const int n = std::max<int>(int(f.R.size()), f.top);
    for (int r = 0; r < n && r < 256; r++)
      if (live.test(r) || (vm::reads_open_top(i) && r >= i.a && r < f.top))
        e_.regs.push_back({r, plan(reg(f, r))});
    e_.top = f.top;
    for (const Var& v : f.va) e_.varargs.push_back(plan(v));
    plan_effects(this, e_, effects_, [&](const Var& v) { return plan(v); });
  } catch (const FallbackSignal& s) {
    return fallback(s.reason);
  }
}

}  // namespace tc::capture
