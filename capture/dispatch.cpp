// dispatch: a compiled function's call. Finds the code cache of the function's prototype, runs the
// first entry whose guards pass (tracing a new one on a miss, up to the recompile limit), runs its
// graph and side effects, and at a break runs the breaking instruction with stock Lua semantics
// before continuing in the resume function, itself dispatched with its own cache.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "capture_state.h"
#include "dump.h"
#include "lua_binding.h"
#include "remembered_dynamic.h"
#include "resume.h"
#include "tc/autograd.h"
#include "tracer.h"
#include "training.h"
#include "verifier.h"

namespace tc::capture {

State& state() {
  static State s;
  return s;
}

// Pushes tc.config[key] (or something that is neither a number nor a boolean); returns the top
// before it.
static int push_config(lua_State* L, const char* key) {
  const int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.module");
  if (lua_istable(L, -1) && lua_getfield(L, -1, "config") == LUA_TTABLE) lua_getfield(L, -1, key);
  return top;
}

int config_int(lua_State* L, const char* key, int fallback) {
  const int top = push_config(L, key);
  if (lua_isinteger(L, -1)) fallback = int(lua_tointeger(L, -1));
  lua_settop(L, top);
  return fallback;
}

bool config_bool(lua_State* L, const char* key, bool fallback) {
  const int top = push_config(L, key);
  if (lua_isboolean(L, -1)) fallback = lua_toboolean(L, -1);
  lua_settop(L, top);
  return fallback;
}

namespace {

enum class Outcome { Call, Results, Raise };

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---- running an entry
// ----------------------------------------------------------------------------
struct Run {
  int base;      // guard slots
  int outs = 0;  // first output userdata
  int tabs = 0;  // table of materialized tables, then closures
  int ntables = 0;
};

// Leaves only the top n values, moved to the bottom of the stack. Not lua_rotate: the guard
// slots below are thousands deep for big models, and rotating moves every one of them.
void keep_top(lua_State* L, int n) {
  const int from = lua_gettop(L) - n + 1;
  if (from > 1)
    for (int j = 0; j < n; j++) lua_copy(L, from + j, 1 + j);
  lua_settop(L, n);
}

void push_plan(lua_State* L, const VPlan& p, const Run& r) {
  switch (p.kind) {
    case VPlan::Kind::Nil:
      lua_pushnil(L);
      break;
    case VPlan::Kind::Bool:
      lua_pushboolean(L, p.b);
      break;
    case VPlan::Kind::Int:
      lua_pushinteger(L, p.i);
      break;
    case VPlan::Kind::Float:
      lua_pushnumber(L, p.f);
      break;
    case VPlan::Kind::Str:
      lua_pushlstring(L, p.s.data(), p.s.size());
      break;
    case VPlan::Kind::Output:
      lua_pushvalue(L, r.outs + int(p.i));
      break;
    case VPlan::Kind::Source:
      lua_pushvalue(L, GuardProgram::slot(r.base, int(p.i)));
      break;
    case VPlan::Kind::Table:
    case VPlan::Kind::Size:
      lua_rawgeti(L, r.tabs, p.i + 1);
      break;
    case VPlan::Kind::Closure:
      lua_rawgeti(L, r.tabs, r.ntables + p.i + 1);
      break;
  }
}

// The closures' upvalues (ClosurePlan): joined to a real function's, or a fresh cell per trace
// cell (set in the first closure that has it, joined by the others).
void close_over(lua_State* L, const Entry& e, const Run& r) {
  std::unordered_map<int, std::pair<int, int>> first;  // cell -> (closure, upvalue)
  for (size_t j = 0; j < e.closures.size(); j++) {
    lua_rawgeti(L, r.tabs, r.ntables + lua_Integer(j) + 1);
    const int c = lua_gettop(L);
    for (size_t n = 0; n < e.closures[j].ups.size(); n++) {
      const ClosurePlan::Up& u = e.closures[j].ups[n];
      if (u.cell < 0) {
        push_plan(L, u.fn, r);
        TC_ASSERT(lua_type(L, -1) == LUA_TFUNCTION, "a closure's upvalue owner is not a function");
        lua_upvaluejoin(L, c, int(n) + 1, lua_gettop(L), u.fn_up);
      } else if (auto it = first.find(u.cell); it != first.end()) {
        lua_rawgeti(L, r.tabs, r.ntables + it->second.first + 1);
        lua_upvaluejoin(L, c, int(n) + 1, lua_gettop(L), it->second.second);
      } else {
        push_plan(L, u.value, r);
        lua_setupvalue(L, c, int(n) + 1);
        first[u.cell] = {int(j), int(n) + 1};
      }
      lua_settop(L, c);
    }
    lua_pop(L, 1);
  }
}

void build_tables(lua_State* L, const Entry& e, Run& r) {
  if (e.tables.empty() && e.closures.empty()) return;
  lua_createtable(L, int(e.tables.size() + e.closures.size()), 0);
  r.tabs = lua_gettop(L);
  r.ntables = int(e.tables.size());
  for (size_t j = 0; j < e.tables.size(); j++) {
    lua_createtable(L, int(e.tables[j].array.size()), int(e.tables[j].hash.size()));
    lua_rawseti(L, r.tabs, lua_Integer(j) + 1);
  }
  for (size_t j = 0; j < e.closures.size(); j++) {
    const ClosurePlan& c = e.closures[j];
    int st = luaL_loadbufferx(L, c.chunk.data(), c.chunk.size(), c.source.c_str(), "b");
    TC_ASSERT(st == LUA_OK, "loading a closure's prototype failed");
    lua_rawseti(L, r.tabs, r.ntables + lua_Integer(j) + 1);
  }
  close_over(L, e, r);
  for (size_t j = 0; j < e.tables.size(); j++) {
    const TablePlan& t = e.tables[j];
    lua_rawgeti(L, r.tabs, lua_Integer(j) + 1);
    const int ti = lua_gettop(L);
    for (size_t a = 0; a < t.array.size(); a++) {
      push_plan(L, t.array[a], r);
      lua_rawseti(L, ti, lua_Integer(a) + 1);
    }
    for (auto& [k, v] : t.hash) {
      push_plan(L, k, r);
      push_plan(L, v, r);
      if (lua_isnil(L, -2))
        lua_pop(L, 2);
      else
        lua_rawset(L, ti);
    }
    lua_pop(L, 1);
  }
  // metatables (Size tables and setmetatable in the trace)
  for (size_t j = 0; j < e.tables.size(); j++) {
    lua_rawgeti(L, r.tabs, lua_Integer(j) + 1);
    if (e.tables[j].metatable.kind != VPlan::Kind::Nil) {
      push_plan(L, e.tables[j].metatable, r);
      lua_setmetatable(L, -2);
    }
    lua_pop(L, 1);
  }
}

void mark_sizes(lua_State* L, const Entry& e, const Run& r, const std::vector<VPlan>& plans) {
  // Size tables get tc.Size as metatable (found through the plans that mention them).
  std::vector<bool> is_size(e.tables.size(), false), seen(e.tables.size(), false);
  std::function<void(const VPlan&)> visit = [&](const VPlan& p) {
    if (p.kind != VPlan::Kind::Size && p.kind != VPlan::Kind::Table) return;
    if (p.kind == VPlan::Kind::Size) is_size[p.i] = true;
    if (seen[p.i]) return;  // tables may hold themselves (A.__index = A)
    seen[p.i] = true;
    for (const VPlan& x : e.tables[p.i].array) visit(x);
    for (auto& [k, v] : e.tables[p.i].hash) visit(k), visit(v);
  };
  for (const VPlan& p : plans) visit(p);
  for (const Effect& ef : e.effects) visit(ef.value);
  for (auto& [reg, p] : e.regs) visit(p);
  for (const ClosurePlan& c : e.closures)
    for (const ClosurePlan::Up& u : c.ups) visit(u.value);
  for (size_t j = 0; j < is_size.size(); j++) {
    if (!is_size[j]) continue;
    lua_rawgeti(L, r.tabs, lua_Integer(j) + 1);
    luaL_setmetatable(L, lua::kSizeMeta);
    lua_pop(L, 1);
  }
}

void apply_effects(lua_State* L, const Entry& e, const Run& r) {
  for (const Effect& ef : e.effects) {
    push_plan(L, ef.target, r);
    const int t = lua_gettop(L);
    if (ef.kind == Effect::Kind::RawSet) {
      if (lua_type(L, t) == LUA_TTABLE) {
        push_plan(L, ef.key, r);
        push_plan(L, ef.value, r);
        lua_rawset(L, t);
      }
    } else if (ef.kind == Effect::Kind::SetGradMode) {
      push_plan(L, ef.value, r);
      lua::set_grad_enabled(lua_toboolean(L, -1));
    } else if (ef.kind == Effect::Kind::SetGrad) {
      push_plan(L, ef.value, r);
      lua_setfield(L, t, "grad");  // the tensor's __newindex, as in eager
    } else if (lua_type(L, t) == LUA_TFUNCTION) {
      push_plan(L, ef.value, r);
      if (!lua_setupvalue(L, t, ef.upval)) lua_pop(L, 1);
    }
    lua_settop(L, t - 1);
  }
}

void push_constant(lua_State* L, const vm::Constant& c) {
  switch (c.tag) {
    case vm::ConstTag::Nil:
      lua_pushnil(L);
      break;
    case vm::ConstTag::False:
      lua_pushboolean(L, 0);
      break;
    case vm::ConstTag::True:
      lua_pushboolean(L, 1);
      break;
    case vm::ConstTag::Int:
      lua_pushinteger(L, c.i);
      break;
    case vm::ConstTag::Float:
      lua_pushnumber(L, c.f);
      break;
    default:
      lua_pushlstring(L, c.s.data(), c.s.size());
      break;
  }
}

// The resume function of `cc`'s function at pc (as a CodeCache; created once per pc).
CodeCache* resume_cache(CodeCache* cc, int pc) {
  const vm::Proto* origin = cc->proto;
  std::string okey = cc->key, odisk = cc->disk_key;
  int opc = pc;
  if (cc->origin && pc >= cc->shift) {
    origin = cc->origin;
    okey = cc->origin_key;
    odisk = cc->origin_disk_key;
    opc = pc - cc->shift;
  }
  const std::string key = okey + "@" + std::to_string(opc);
  auto& caches = state().caches;
  auto it = caches.find(key);
  if (it != caches.end()) return it->second.get();
  vm::ResumePlan plan = vm::plan_resume(*origin, opc);
  auto proto = std::make_unique<vm::Proto>(vm::synthesize_resume(*origin, plan));
  auto issues = vm::verify(*proto);
  if (!issues.empty())
    throw vm::BytecodeError("synthesized resume function fails verification: " + issues[0].message);
  auto c = std::make_shared<CodeCache>();
  c->key = key;
  c->disk_key = odisk + "@" + std::to_string(opc);
  c->origin_disk_key = odisk;
  c->remember = cc->remember;
  if (c->remember) c->dynamic = read_remembered(c->disk_key);
  c->proto = proto.get();
  c->analysis = std::make_shared<vm::Analysis>(vm::analyze(*proto));
  c->origin = origin;
  c->origin_key = okey;
  c->origin_pc = opc;
  c->shift = int(proto->code.size() - origin->code.size());
  c->chunk = vm::write_chunk(*proto);
  const int line = [&] {
    auto lines = vm::decode_lines(*origin);
    return opc < int(lines.size()) ? lines[opc] : origin->linedefined;
  }();
  c->fn_name = cc->fn_name;
  c->name = "resume of " + cc->fn_name + " at line " + std::to_string(line);
  state().resume_protos.push_back(std::move(proto));
  CodeCache* out = c.get();
  caches[key] = std::move(c);
  return out;
}

// Pushes the resume closure of the function at fn_idx for cache rc (memoized per function in a
// weak table, its upvalues joined to the function's cells).
void push_resume_closure(lua_State* L, int fn_idx, CodeCache* rc) {
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.resumes");
  const int memo = lua_gettop(L);
  lua_pushvalue(L, fn_idx);
  if (lua_rawget(L, memo) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, fn_idx);
    lua_pushvalue(L, -2);
    lua_rawset(L, memo);
  }
  const int per_fn = lua_gettop(L);
  lua_pushlstring(L, rc->key.data(), rc->key.size());
  if (lua_rawget(L, per_fn) == LUA_TFUNCTION) {
    lua_replace(L, memo);
    lua_settop(L, memo);
    return;
  }
  lua_pop(L, 1);
  const std::string& chunk = rc->chunk;
  int st = luaL_loadbufferx(L, chunk.data(), chunk.size(), rc->proto->source.value_or("=?").c_str(),
                            "b");
  TC_ASSERT(st == LUA_OK, "loading a verified resume chunk failed");
  const int fresh = lua_gettop(L);
  for (int j = 1; j <= int(rc->proto->upvalues.size()); j++)
    lua_upvaluejoin(L, fresh, j, fn_idx, j);
  lua_pushlstring(L, rc->key.data(), rc->key.size());
  lua_pushvalue(L, fresh);
  lua_rawset(L, per_fn);
  lua_replace(L, memo);
  lua_settop(L, memo);
}

// A call made at a break runs from Lua (so it may yield, and errors keep their traceback):
// dispatch returns [after, cont, f, args...]; `after` is `function(cont, f, ...) return
// pass(after_call(cont, f(...))) end`. cont (user values: registers, varargs, the function)
// remembers where to resume.
constexpr const char* kContMeta = "tc.PendingCall";
struct Cont {
  std::shared_ptr<CodeCache> cc;
  std::shared_ptr<CompileConfig> cfg;
  int pc;
};

int cont_gc(lua_State* L) {
  static_cast<Cont*>(lua_touserdata(L, 1))->~Cont();
  return 0;
}

// Pushes the cont of a call at the break at pc: the registers R, the varargs VA and the function
// (stack index 1) as its user values.
void push_cont(lua_State* L, CodeCache* cc, const std::shared_ptr<CompileConfig>& cfg, int pc,
               int R, int VA) {
  void* mem = lua_newuserdatauv(L, sizeof(Cont), 3);
  new (mem) Cont{state().caches.at(cc->key), cfg, pc};
  if (luaL_newmetatable(L, kContMeta)) {
    lua_pushcfunction(L, cont_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_pushvalue(L, R);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, VA);
  lua_setiuservalue(L, -2, 2);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 3);
}

// The function that makes a call at a break: `function(cont, f, ...) return pass(after_call(cont,
// f(...))) end` (or `function(f, ...) return f(...) end` for a tail call), loaded once per call
// site with the user's chunk name and line, so that error() and argument errors of the callee
// name the user's line, as without compilation. The callee's frame gets the name Lua's debug
// interface finds for it in the user's code (luaL_argerror words "bad argument #1 to 'rep'" from
// it, and leaves self out of the count for a method), through the form of the helper's own call.
// TailCallKeep, for a tail call of tc's C trampoline (x:cuda()), keeps the helper's frame while
// the callee runs, as eager Lua keeps the caller's frame under a C function it tail-calls:
enum class Site { Call, TailCall, Compare, TailCallKeep };
enum class Naming {
  Param,      // `f` is a parameter of the callee's name (local, global, field, upvalue: the name)
  Method,     // `self:name(...)`: Lua's method call, the method looked up again (see below)
  Field,      // `t["name"](...)`, t = {["name"] = f}: names that are not Lua identifiers
  Anonymous,  // `id(f)(...)`: no name (luaL_argerror then looks for a global function's name)
};

bool lua_identifier(const std::string& s) {
  static const char* const reserved[] = {
      "and",  "break", "do",  "else",  "elseif", "end", "false", "for",    "function",   "goto",
      "if",   "in",    "local", "nil", "not",    "or",  "repeat", "return", "then",      "true",
      "until", "while", "cont", "pass", "after_call", "id"};  // the last: the helper's own names
  if (s.empty() || std::isdigit((unsigned char)s[0])) return false;
  for (char c : s)
    if (!std::isalnum((unsigned char)c) && c != '_') return false;
  for (const char* r : reserved)
    if (s == r) return false;
  return true;
}

std::string lua_quoted(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\' || c < 32 || c > 126) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\%03d", int(c));
      q += esc;
    } else {
      q += char(c);
    }
  }
  return q + "\"";
}

// How the helper of entry e's CALL names its callee, given nargs arguments.
Naming naming_of(const Entry& e, int nargs) {
  if (e.callee_kind.empty()) return Naming::Anonymous;
  if (e.callee_kind == "method" && nargs >= 1) return Naming::Method;
  return lua_identifier(e.callee_name) ? Naming::Param : Naming::Field;
}

// The Method helper: its text says `self:name(...)`, whose SELF instruction is what Lua's debug
// interface reads ("method 'name'": findsetreg takes the last instruction before the call that
// sets the callee's register, ignoring jumps to beyond the call). The callee is f, found by the
// trace; looking it up again could run an __index function twice. So the SELF is jumped over:
//   k: JMP -> e      k+1: SELF A self "name"     k+2: (the arguments) ... CALL A
//   e: MOVE A f      e+1: MOVE A+1 self          e+2: JMP -> k+2
// It replaces the helper chunk on top of the stack with the patched one.
void load_method_helper(lua_State* L, const std::string& chunkname, int f_reg) {
  vm::Proto main = vm::read_chunk(vm::dump_function(L));
  lua_pop(L, 1);
  TC_ASSERT(main.protos.size() == 2, "method helper: unexpected chunk");
  vm::Proto& h = main.protos[1];  // protos[0] is id
  int k = -1;
  for (int pc = 0; pc < int(h.code.size()); pc++)
    if (vm::decode(h.code[pc]).op == vm::OpCode::SELF) k = pc;
  TC_ASSERT(k >= 0, "method helper: no SELF");
  const vm::Ins self_ins = vm::decode(h.code[k]);
  std::vector<int> lines = vm::decode_lines(h);
  const int line = lines[k];
  h.code.insert(h.code.begin() + k, 0);  // the JMP, below
  lines.insert(lines.begin() + k, line);
  const int e = int(h.code.size());
  h.code[k] = vm::make_sj(vm::OpCode::JMP, e - (k + 1));
  h.code.push_back(vm::make_abc(vm::OpCode::MOVE, self_ins.a, f_reg, 0));
  h.code.push_back(vm::make_abc(vm::OpCode::MOVE, self_ins.a + 1, self_ins.b, 0));
  h.code.push_back(vm::make_sj(vm::OpCode::JMP, (k + 2) - (e + 3)));
  lines.insert(lines.end(), 3, line);
  vm::encode_lines(h, lines);
  for (vm::LocVar& v : h.locvars) {
    if (v.startpc > k) v.startpc++;
    if (v.endpc > k) v.endpc++;
  }
  vm::load_binary(L, vm::write_chunk(main), chunkname.c_str());
}

void push_site_helper(lua_State* L, const vm::Proto& p, int pc, Site site, Naming naming,
                      const std::string& name) {
  const std::vector<int> lines = vm::decode_lines(p);
  const int line = pc < int(lines.size()) && lines[pc] > 0 ? lines[pc] : 1;
  const std::string source = p.source.value_or("=?");
  static const char* const suffix[] = {":call", ":tail", ":compare", ":tailkeep"};
  const std::string key = source + ":" + std::to_string(line) + ":" +
                          std::to_string(int(naming)) + name + suffix[int(site)];
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.sites");
  if (lua_getfield(L, -1, key.c_str()) == LUA_TFUNCTION) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  std::string params, call;  // the callee and its arguments; the call of it
  switch (naming) {
    case Naming::Param:
      params = name + ", ...", call = name + "(...)";
      break;
    case Naming::Method:  // patched by load_method_helper
      params = "f, self, ...", call = "self:" + name + "(...)";
      break;
    case Naming::Field:
      params = "f, ...", call = "({[" + lua_quoted(name) + "] = f})[" + lua_quoted(name) + "](...)";
      break;
    case Naming::Anonymous:
      params = "f, ...", call = "id(f)(...)";
      break;
  }
  std::string text(line - 1, '\n');
  text += "local pass, after_call = ... local function id(...) return ... end ";
  switch (site) {
    case Site::Call:
      text += "return function(cont, " + params + ") return pass(after_call(cont, " + call + ")) end";
      break;
    case Site::TailCall:
      text += "return function(" + params + ") return " + call + " end";
      break;
    case Site::TailCallKeep:
      text += "return function(" + params + ") return id(" + call + ") end";
      break;
    case Site::Compare:  // mm: the metamethod Lua would call, compiled (compare_metamethod)
      text += "return function(kind, a, b, mm) if mm then return not not mm(a, b) elseif kind == 0 "
              "then return a == b elseif kind == 1 then return a < b else return a <= b end end";
      break;
  }
  int st = luaL_loadbufferx(L, text.data(), text.size(), source.c_str(), "t");
  TC_ASSERT(st == LUA_OK, "call-site helper does not load");
  if (naming == Naming::Method) load_method_helper(L, source, site == Site::Call ? 1 : 0);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.pass");
  lua_pushcfunction(L, l_after_call);
  lua_call(L, 2, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, key.c_str());
  lua_remove(L, -2);
}

// Leaves [resume fn, args...] for the resume point `next` given the registers R, varargs VA and
// `top`; `fn_idx` is the function whose cells the resume function shares.
void push_resume_call(lua_State* L, CodeCache*& cc, int fn_idx, int R, int VA, int top, int next,
                      bool uncompiled) {
  CodeCache* rc = resume_cache(cc, next);
  vm::ResumePlan plan = vm::plan_resume(*cc->proto, *cc->analysis, next);
  TC_ASSERT(plan.ok(), "a resume point checked while tracing is refused at run time");
  push_resume_closure(L, fn_idx, rc);
  const int fn = lua_gettop(L);
  for (int reg : plan.registers) lua_rawgeti(L, R, reg + 1);
  if (plan.varargs)
    for (lua_Integer j = 1; j <= lua_Integer(lua_rawlen(L, VA)); j++) lua_rawgeti(L, VA, j);
  if (plan.open_results)
    for (int reg = plan.open_base; reg < top; reg++) lua_rawgeti(L, R, reg + 1);
  const int n = lua_gettop(L) - fn + 1;
  keep_top(L, n);
  cc = uncompiled ? nullptr : rc;
}

// An indexing instruction at a break (GETTABUP, GETTABLE, GETI, GETFIELD, SELF: t[k] into R[A];
// SETTABUP, SETTABLE, SETI, SETFIELD: t[k] = v), run as Lua runs it: raw reads and writes along
// the __index/__newindex chain of tables; a metamethod function is called through the call-site
// helper (a Lua one compiled, with its own caches), and when it returns l_after_call puts its
// result in R[A] (reads). Done: the instruction is done, resume after it. Call: the stack holds
// [helper, cont, handler, object, key(, value)] for Lua to call. Stock: Lua would raise (indexing
// a value without the metamethod, a nil or NaN key written, a chain of 2000 hops): the resume
// function at the instruction runs it in stock Lua, with eager's message.
enum class IndexRun { Done, Call, Stock };

bool is_write(vm::OpCode op) {
  return op == vm::OpCode::SETTABUP || op == vm::OpCode::SETTABLE || op == vm::OpCode::SETI ||
         op == vm::OpCode::SETFIELD;
}

IndexRun index_at_break(lua_State* L, const vm::Proto& p, const Entry& e, CodeCache* cc,
                        const std::shared_ptr<CompileConfig>& cfg, int R, int VA) {
  const vm::Ins i = vm::decode(p.code[e.pc]);
  const bool write = is_write(i.op);
  const int base = lua_gettop(L);
  // push t, key: reads index R[B] (or upvalue B) with C, writes R[A] (or upvalue A) with B
  const int tab = write ? i.a : i.b, k = write ? i.b : i.c;
  if (i.op == vm::OpCode::GETTABUP || i.op == vm::OpCode::SETTABUP) {
    if (!lua_getupvalue(L, 1, tab + 1)) lua_pushnil(L);
  } else {
    lua_rawgeti(L, R, tab + 1);
  }
  if (i.op == vm::OpCode::GETTABLE || i.op == vm::OpCode::SETTABLE ||
      (i.op == vm::OpCode::SELF && !i.k))
    lua_rawgeti(L, R, k + 1);
  else if (i.op == vm::OpCode::GETI || i.op == vm::OpCode::SETI)
    lua_pushinteger(L, k);
  else
    push_constant(L, p.k[k]);
  if (i.op == vm::OpCode::SELF) {  // R[A+1] = t
    lua_pushvalue(L, -2);
    lua_rawseti(L, R, i.a + 2);
  }
  const int key = lua_gettop(L);
  if (write) {  // the value: RK(C)
    if (i.k)
      push_constant(L, p.k[i.c]);
    else
      lua_rawgeti(L, R, i.c + 1);
  }
  const int val = write ? lua_gettop(L) : 0;
  const char* event = write ? "__newindex" : "__index";
  lua_pushvalue(L, key - 1);  // cur: the object indexed now
  for (int hop = 0; hop < 2000; hop++) {
    if (lua_type(L, -1) == LUA_TTABLE) {
      lua_pushvalue(L, key);
      if (lua_rawget(L, -2) != LUA_TNIL) {  // found: read it, or overwrite it raw
        if (!write) {
          lua_rawseti(L, R, i.a + 1);
        } else {
          lua_pop(L, 1);
          lua_pushvalue(L, key);
          lua_pushvalue(L, val);
          lua_rawset(L, -3);
        }
        lua_settop(L, base);
        return IndexRun::Done;
      }
      lua_pop(L, 1);
    }
    if (luaL_getmetafield(L, -1, event) == LUA_TNIL) {
      const bool table = lua_type(L, -1) == LUA_TTABLE;
      const bool bad_key = lua_isnil(L, key) || (lua_type(L, key) == LUA_TNUMBER &&
                                                 lua_tonumber(L, key) != lua_tonumber(L, key));
      if (!table || (write && bad_key)) break;  // Lua raises
      if (write) {  // a new key, raw
        lua_pushvalue(L, key);
        lua_pushvalue(L, val);
        lua_rawset(L, -3);
      } else {
        lua_pushnil(L);
        lua_rawseti(L, R, i.a + 1);
      }
      lua_settop(L, base);
      return IndexRun::Done;
    }
    if (lua_type(L, -1) == LUA_TFUNCTION) {  // h(cur, key(, value)) through the call-site helper
      const int h = lua_gettop(L), cur = h - 1;
      push_site_helper(L, p, e.pc, Site::Call, Naming::Param, event + 2);  // "index", "newindex"
      push_cont(L, cc, cfg, e.pc, R, VA);
      lua_pushvalue(L, h);
      if (!lua_iscfunction(L, -1)) {
        push_wrapper(L, lua_gettop(L), cfg);
        lua_remove(L, -2);
      }
      lua_pushvalue(L, cur);
      lua_pushvalue(L, key);
      if (write) lua_pushvalue(L, val);
      const int n = write ? 6 : 5;
      lua_rotate(L, base + 1, n);  // the call to the bottom of what this function pushed
      lua_settop(L, base + n);
      return IndexRun::Call;
    }
    lua_remove(L, -2);  // cur = the metamethod value, indexed in turn
  }
  lua_settop(L, base);
  return IndexRun::Stock;
}

// A Lua __tostring called compiled: luaL_tolstring's value of the value at idx, pushed.
// `cfg` lives in the caller's upvalue (no C++ object may live across a Lua error here).
const char* tolstring(lua_State* L, int idx, const std::shared_ptr<CompileConfig>& cfg) {
  idx = lua_absindex(L, idx);
  if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
    if (lua_type(L, -1) == LUA_TFUNCTION && !lua_iscfunction(L, -1)) {
      push_wrapper(L, lua_gettop(L), cfg);
      lua_remove(L, -2);
      lua_pushvalue(L, idx);
      lua_call(L, 1, 1);
      if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
      return lua_tostring(L, -1);
    }
    lua_pop(L, 1);
  }
  return luaL_tolstring(L, idx, nullptr);
}

constexpr const char* kConfigMeta = "tc.CompileConfig";  // a userdata holding one (upvalues)

const std::shared_ptr<CompileConfig>& upvalue_config(lua_State* L) {
  return *static_cast<std::shared_ptr<CompileConfig>*>(lua_touserdata(L, lua_upvalueindex(1)));
}

// tostring and print as the base library's, with a Lua __tostring called compiled.
int l_tostring(lua_State* L) {
  luaL_checkany(L, 1);
  tolstring(L, 1, upvalue_config(L));
  return 1;
}

int l_print(lua_State* L) {
  const int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    tolstring(L, i, upvalue_config(L));
    const char* s = lua_tolstring(L, -1, &len);
    if (i > 1) std::fwrite("\t", 1, 1, stdout);
    std::fwrite(s, 1, len, stdout);
    lua_pop(L, 1);
  }
  std::fwrite("\n", 1, 1, stdout);
  std::fflush(stdout);
  return 0;
}

// The base library's tostring or print at idx, replaced by l_tostring or l_print.
void replace_tostring(lua_State* L, int idx, const std::shared_ptr<CompileConfig>& cfg) {
  const Known& kn = known();
  const lua_CFunction cf = lua_tocfunction(L, idx);
  if (!cf || (cf != kn.tostring && cf != kn.print)) return;
  void* mem = lua_newuserdatauv(L, sizeof(std::shared_ptr<CompileConfig>), 0);
  new (mem) std::shared_ptr<CompileConfig>(cfg);
  if (luaL_newmetatable(L, kConfigMeta)) {
    lua_pushcfunction(L, [](lua_State* L) {
      static_cast<std::shared_ptr<CompileConfig>*>(lua_touserdata(L, 1))->~shared_ptr();
      return 0;
    });
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_pushcclosure(L, cf == kn.tostring ? l_tostring : l_print, 1);
  lua_replace(L, idx);
}

// Compile-all, at a call of the C function at `callee` (its arguments above it) made at a break:
// the Lua functions it will call go through the compiler too. The function argument of pcall,
// sort, gsub, coroutine.create/wrap (Known::calls_arg); a callable table given to pcall or xpcall
// (called as its __call, the table inserted as Lua inserts it); a Lua __tostring of tostring's or
// print's arguments (those two are replaced by l_tostring and l_print).
void compile_called_from_c(lua_State* L, int callee, const std::shared_ptr<CompileConfig>& cfg) {
  const Known& kn = known();
  const lua_CFunction cf = lua_tocfunction(L, callee);
  auto it = kn.calls_arg.find(cf);
  const int a = it == kn.calls_arg.end() ? 0 : callee + it->second;
  if (a && a <= lua_gettop(L) && lua_type(L, a) == LUA_TFUNCTION && !lua_iscfunction(L, a)) {
    push_wrapper(L, a, cfg);
    lua_replace(L, a);
  } else if (auto v = kn.calls_value.find(cf);
             v != kn.calls_value.end() && a && a + v->second - 1 <= lua_gettop(L) &&
             lua_type(L, a) != LUA_TFUNCTION && luaL_getmetafield(L, a, "__call") != LUA_TNIL) {
    // (xpcall without its handler raises as it is)
    if (lua_type(L, -1) == LUA_TFUNCTION && !lua_iscfunction(L, -1)) {
      push_wrapper(L, lua_gettop(L), cfg);
      lua_remove(L, -2);
      lua_pushvalue(L, a);  // [f, obj, (handler,) args..., wrapper, obj]
      lua_insert(L, a + v->second);
      lua_replace(L, a);
    } else {
      lua_pop(L, 1);
    }
  }
  replace_tostring(L, callee, cfg);
  if (kn.calls_value.count(cf) && a && a <= lua_gettop(L)) replace_tostring(L, a, cfg);  // pcall(print, x)
}

// Under compile-all, the metamethod a comparison (kind 0 ==, 1 <, 2 <=) of the values at a and
// a + 1 makes Lua call, when it is a Lua function: pushed compiled (true), as Lua finds it (raw
// fields of the first operand's metatable, then the second's; __eq only between two tables or
// two full userdata that are not the same object). Nothing pushed otherwise (false).
bool push_compare_metamethod(lua_State* L, int kind, int a,
                             const std::shared_ptr<CompileConfig>& cfg) {
  if (!state().compile_all) return false;
  const int b = a + 1, ta = lua_type(L, a), tb = lua_type(L, b);
  if (kind == 0 ? ta != tb || (ta != LUA_TTABLE && ta != LUA_TUSERDATA) || lua_rawequal(L, a, b)
                : (ta == LUA_TNUMBER && tb == LUA_TNUMBER) || (ta == LUA_TSTRING && tb == LUA_TSTRING))
    return false;
  const char* event = kind == 0 ? "__eq" : kind == 1 ? "__lt" : "__le";
  if (luaL_getmetafield(L, a, event) == LUA_TNIL && luaL_getmetafield(L, b, event) == LUA_TNIL)
    return false;
  if (lua_type(L, -1) != LUA_TFUNCTION || lua_iscfunction(L, -1)) {
    lua_pop(L, 1);
    return false;
  }
  push_wrapper(L, lua_gettop(L), cfg);
  lua_remove(L, -2);
  return true;
}

// Runs the breaking instruction on the rebuilt registers and leaves [next function, args...]
// on the stack (returns Call), or the results of a tail call ([ident, results...], Results), or
// an error value (Raise). `cc` becomes the next function's cache (null: call it uncompiled).
Outcome run_break(lua_State* L, const Entry& e, CodeCache*& cc,
                  const std::shared_ptr<CompileConfig>& cfg, Run& r) {
  const vm::Proto& p = *cc->proto;
  const vm::Ins i = vm::decode(p.code[e.pc]);
  lua_createtable(L, std::max<int>(p.maxstacksize, e.top), 0);
  const int R = lua_gettop(L);
  for (auto& [reg, plan] : e.regs) {
    push_plan(L, plan, r);
    lua_rawseti(L, R, reg + 1);
  }
  lua_createtable(L, int(e.varargs.size()), 0);
  const int VA = lua_gettop(L);
  for (size_t j = 0; j < e.varargs.size(); j++) {
    push_plan(L, e.varargs[j], r);
    lua_rawseti(L, VA, lua_Integer(j) + 1);
  }
  int top = e.top;
  int next = -1;
  switch (i.op) {
    case vm::OpCode::CALL:
    case vm::OpCode::TAILCALL: {
      const int nargs = i.b ? i.b - 1 : top - i.a - 1;
      lua_rawgeti(L, R, i.a + 1);  // what Lua calls: the callee, or its __call
      if (!lua_isfunction(L, -1) && luaL_getmetafield(L, -1, "__call") != LUA_TNIL) lua_remove(L, -2);
      const bool keep = i.op == vm::OpCode::TAILCALL && lua_iscfunction(L, -1) &&
                        lua::trampoline_target(L, -1);
      lua_settop(L, VA);
      const int call_base = lua_gettop(L);
      push_site_helper(L, p, e.pc,
                       keep ? Site::TailCallKeep : i.op == vm::OpCode::TAILCALL ? Site::TailCall : Site::Call,
                       naming_of(e, nargs), e.callee_name);
      lua_rawgeti(L, R, i.a + 1);  // not callable: eager's error, naming the value as Lua does
      if (push_call_error(L, p, e.pc, lua_gettop(L), call_base + 1)) return Outcome::Raise;
      lua_pop(L, 1);
      if (i.op == vm::OpCode::CALL) push_cont(L, cc, cfg, e.pc, R, VA);
      lua_rawgeti(L, R, i.a + 1);
      const int callee = lua_gettop(L);
      // Lua functions called at a break go through the compiler too (regional compilation),
      // tc's trampolines (a module's __call) as the Lua function they call.
      if (lua_type(L, callee) == LUA_TFUNCTION && (!lua_iscfunction(L, callee) ||
                                                   lua::trampoline_target(L, callee))) {
        push_wrapper(L, lua_gettop(L), cfg);
        if (lua_gettop(L) > callee + 1) lua_remove(L, -2);  // the trampoline's target
        lua_replace(L, callee);
      } else if (lua_type(L, callee) == LUA_TTABLE &&
                 luaL_getmetafield(L, callee, "__call") != LUA_TNIL) {
        if (lua_type(L, -1) == LUA_TFUNCTION &&
            (!lua_iscfunction(L, -1) || (lua::trampoline_target(L, -1) && (lua_remove(L, -2), true)))) {
          push_wrapper(L, lua_gettop(L), cfg);
          lua_replace(L, -2);
          lua_insert(L, callee);  // wrapper, table
        } else {
          lua_pop(L, 1);
        }
      }
      for (int j = 0; j < nargs; j++) lua_rawgeti(L, R, i.a + 2 + j);
      if (state().compile_all && lua_iscfunction(L, callee)) compile_called_from_c(L, callee, cfg);
      // [after, cont,] f, args...: Lua makes the call (a tail call for TAILCALL)
      const int n = lua_gettop(L) - call_base;
      keep_top(L, n);
      cc = nullptr;
      return Outcome::Call;
    }
    case vm::OpCode::TEST:
    case vm::OpCode::TESTSET: {
      lua_rawgeti(L, R, (i.op == vm::OpCode::TEST ? i.a : i.b) + 1);
      const bool truthy = lua_toboolean(L, -1);
      if (truthy != i.k) {
        lua_pop(L, 1);
        next = e.pc + 2;
      } else {
        if (i.op == vm::OpCode::TESTSET)
          lua_rawseti(L, R, i.a + 1);
        else
          lua_pop(L, 1);
        next = e.pc + 2 + vm::decode(p.code[e.pc + 1]).sj;
      }
      break;
    }
    case vm::OpCode::EQ:
    case vm::OpCode::LT:
    case vm::OpCode::LE:
    case vm::OpCode::EQK:
    case vm::OpCode::EQI:
    case vm::OpCode::LTI:
    case vm::OpCode::LEI:
    case vm::OpCode::GTI:
    case vm::OpCode::GEI: {
      // cmp(kind, a, b) is a Lua helper at the user's line: metamethods and their errors behave
      // as in stock Lua.
      push_site_helper(L, p, e.pc, Site::Compare, Naming::Anonymous, "");
      int kind = 0;
      auto push_imm = [&] {
        if (i.c)
          lua_pushnumber(L, i.sb());
        else
          lua_pushinteger(L, i.sb());
      };
      switch (i.op) {
        case vm::OpCode::EQ:
          kind = 0;
          lua_pushinteger(L, 0);
          lua_rawgeti(L, R, i.a + 1);
          lua_rawgeti(L, R, i.b + 1);
          break;
        case vm::OpCode::LT:
          kind = 1;
          lua_pushinteger(L, 1);
          lua_rawgeti(L, R, i.a + 1);
          lua_rawgeti(L, R, i.b + 1);
          break;
        case vm::OpCode::LE:
          kind = 2;
          lua_pushinteger(L, 2);
          lua_rawgeti(L, R, i.a + 1);
          lua_rawgeti(L, R, i.b + 1);
          break;
        case vm::OpCode::EQK:
          lua_pushinteger(L, 0);
          lua_rawgeti(L, R, i.a + 1);
          push_constant(L, p.k[i.b]);
          break;
        case vm::OpCode::EQI:
          lua_pushinteger(L, 0);
          lua_rawgeti(L, R, i.a + 1);
          push_imm();
          break;
        case vm::OpCode::LTI:
          lua_pushinteger(L, 1);
          lua_rawgeti(L, R, i.a + 1);
          push_imm();
          break;
        case vm::OpCode::LEI:
          lua_pushinteger(L, 2);
          lua_rawgeti(L, R, i.a + 1);
          push_imm();
          break;
        case vm::OpCode::GTI:
          lua_pushinteger(L, 1);
          push_imm();
          lua_rawgeti(L, R, i.a + 1);
          break;
        default:
          lua_pushinteger(L, 2);
          push_imm();
          lua_rawgeti(L, R, i.a + 1);
          break;
      }
      const int nargs = push_compare_metamethod(L, kind, lua_gettop(L) - 1, cfg) ? 4 : 3;
      if (lua_pcall(L, nargs, 1, 0) != LUA_OK) return Outcome::Raise;
      const bool cond = lua_toboolean(L, -1);
      lua_pop(L, 1);
      next = cond != i.k ? e.pc + 2 : e.pc + 2 + vm::decode(p.code[e.pc + 1]).sj;
      break;
    }
    default:

      if (e.index_at_break) {
        const int top_before_index = lua_gettop(L);
        switch (index_at_break(L, p, e, cc, cfg, R, VA)) {
          case IndexRun::Done:
            next = e.pc + 1;
            break;
          case IndexRun::Call:  // [helper, cont, h, object, key(, value)]
            keep_top(L, lua_gettop(L) - top_before_index);
            cc = nullptr;
            return Outcome::Call;
          case IndexRun::Stock:
            next = e.pc;
            break;
        }
        break;
      }
      if (e.arith >= 0) {  // arithmetic on strings (arith_at_break): Lua's own, then resume
        lua_pushcfunction(L, [](lua_State* L) {
          lua_arith(L, int(lua_tointeger(L, 1)));
          return 1;
        });
        lua_pushinteger(L, e.arith);
        const bool unary = i.op == vm::OpCode::UNM || i.op == vm::OpCode::BNOT;
        if (i.op == vm::OpCode::SHLI) {
          lua_pushinteger(L, i.sc());
          lua_rawgeti(L, R, i.b + 1);
        } else {
          lua_rawgeti(L, R, i.b + 1);
          if (i.op == vm::OpCode::ADDI || i.op == vm::OpCode::SHRI)
            lua_pushinteger(L, i.sc());
          else if (i.op >= vm::OpCode::ADDK && i.op <= vm::OpCode::BXORK)
            push_constant(L, p.k[i.c]);
          else if (!unary)
            lua_rawgeti(L, R, i.c + 1);
        }
        if (lua_pcall(L, unary ? 2 : 3, 1, 0) != LUA_OK) return Outcome::Raise;
        lua_rawseti(L, R, i.a + 1);
        next = e.pc + (unary ? 1 : 2);
        break;
      }
      next = e.pc;
      break;  // resumed uncompiled: the resume function runs the instruction
  }
  // The next function: the resume function at `next`, with the live registers as arguments.
  push_resume_call(L, cc, 1, R, VA, top, next, e.resume_uncompiled || (e.index_at_break && next == e.pc));
  return Outcome::Call;
}

// An op of the graph failed while it ran: eager's error (kind, message) at the node's user line.
void push_node_error(lua_State* L, const Graph& g, const NodeError& err) {
  lua::push_error(L, error_kind_name(err.kind()), err.what(), 1);
  const Node& n = g.nodes[err.node];
  // a node made in tc's own Lua (x:cuda() in tc._tensor.lua, compiled on its own after a break)
  // keeps push_error's position: the user's line that called into tc
  if (n.line <= 0 || n.file.rfind("[tc]/", 0) == 0) return;
  lua_pushstring(L, n.file.c_str());
  lua_setfield(L, -2, "file");
  lua_pushinteger(L, n.line);
  lua_setfield(L, -2, "line");
}

// Runs entry e whose guards passed (slots above `base`). Returns Call with [next fn, args...]
// (cc set to its cache, or null for an uncompiled call), Results, or Raise.
Outcome execute(lua_State* L, const Entry& e, CodeCache*& cc,
                const std::shared_ptr<CompileConfig>& cfg, int base) {
  if (e.end == EndKind::Fallback) {
    lua_settop(L, base);
    cc = nullptr;
    return Outcome::Call;
  }
  Run r{base};
  if (e.graph.num_ops() > 0) {
    std::vector<Tensor> outs;
    // A compiled graph records no autograd tape: a training entry links its outputs to its
    // compiled backward (training.cpp); other graphs' outputs require no grad. A Lua function
    // backend's callable runs in the caller's grad mode (what it computes eagerly records, as
    // torch.compile's custom backends do).
    std::optional<GradModeGuard> no_tape;
    if (e.lua_backend_ref == LUA_NOREF) no_tape.emplace(false);
    if (e.lua_backend_ref != LUA_NOREF) {
      std::vector<int> slots;
      for (int s : e.input_sources) slots.push_back(GuardProgram::slot(base, s));
      if (!lua_backend_run(L, e.lua_backend_ref, slots, e.number_inputs, e.graph.outputs.size(),
                           &outs))
        return Outcome::Raise;
    } else {
      // borrowed: live inputs sit in their slots, known ones in the memo's table, which the
      // fast path leaves on the stack for the call
      std::vector<const Tensor*> inputs;
      std::vector<Tensor> numbers;  // unspecialized numbers: 0-dim wrapped-number inputs
      inputs.reserve(e.input_sources.size());
      numbers.reserve(e.number_inputs.size());  // none: no allocation
      for (int s : e.input_sources) {
        const Tensor* t = e.guards.tensor_at(L, base, s);
        if (!t) {
          numbers.push_back(number_input(L, GuardProgram::slot(base, s)));
          t = &numbers.back();
        }
        inputs.push_back(t);
      }
      RunningState running(L);
      try {
        if (e.trains) {
          GradModeGuard tape(true);
          outs = run_training(L, e, cc->name, *cfg, inputs);
        } else {
          outs = e.run(inputs);
        }
      } catch (const NodeError& err) {
        push_node_error(L, e.graph, err);
        return Outcome::Raise;
      }
    }
    lua_checkstack(L, int(outs.size()) + 16);
    r.outs = lua_gettop(L) + 1;
    for (const Tensor& t : outs) lua::push_tensor(L, t);
    lua::gc_pressure(L);
  }
  build_tables(L, e, r);
  if (r.tabs) mark_sizes(L, e, r, e.returns);
  apply_effects(L, e, r);
  if (e.end == EndKind::Return) {
    lua_checkstack(L, int(e.returns.size()) + 4);
    lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.ident");
    for (const VPlan& p : e.returns) push_plan(L, p, r);
    const int n = int(e.returns.size()) + 1;
    keep_top(L, n);
    return Outcome::Results;
  }
  return run_break(L, e, cc, cfg, r);
}

// The dims that changed size in the tensor guards that failed (same dtype, device and rank): every
// such guard, not only the first, so that a batch dim shared by x and its target y turns dynamic in
// both at once (one of them dynamic and the other static cannot lower: the graph's broadcasts tie
// them). A number whose Equals guard failed first is no longer specialized.
void learn_dynamic(lua_State* L, CodeCache* cc, const Entry& last, int base) {
  const int first = last.guards.first_failure(L, base);
  if (first < 0) return;
  const Guard& g0 = last.guards.guards[first];
  if (g0.kind == GuardKind::Equals && g0.vtype == LUA_TNUMBER &&
      lua_type(L, GuardProgram::slot(base, g0.src)) == LUA_TNUMBER) {
    // a number that changed: from now on it is not specialized (dim -1: the number itself)
    cc->dynamic.push_back({last.guards.describe(g0.src), -1});
    if (cc->remember) write_remembered(cc->disk_key, cc->dynamic);
    return;
  }
  struct Remember {  // the dims learned here go to the cache directory for the next run
    CodeCache* cc;
    size_t before;
    ~Remember() {
      if (cc->remember && cc->dynamic.size() > before) write_remembered(cc->disk_key, cc->dynamic);
    }
  } remember{cc, cc->dynamic.size()};
  // after a failure every slot holds its source's value (guards.h)
  for (int i = first; i < int(last.guards.guards.size()); i++) {
    const Guard& g = last.guards.guards[i];
    if (g.kind != GuardKind::Tensor) continue;
    const Tensor* t = lua::to_tensor(L, GuardProgram::slot(base, g.src));
    if (!t || t->dtype() != g.tensor.dtype || t->device() != g.tensor.device ||
        t->dim() != int64_t(g.tensor.sizes.size()))
      continue;
    std::string where;
    for (int d = 0; d < t->dim(); d++)
      if (t->sizes()[d] != g.tensor.sizes[d] && t->sizes()[d] >= 2 && !(g.tensor.dynamic >> d & 1)) {
        if (where.empty()) where = last.guards.describe(g.src);
        cc->dynamic.push_back({where, d});
      }
  }
}

std::string cache_name(const CodeCache* cc) {
  return cc->name;
}

// The sources whose slots execute() reads after the guards passed (the guards' fast path fills
// only those): value plans and a Lua backend's inputs.
std::vector<int> sources_read_after_check(const Entry& e) {
  std::vector<int> out;
  auto visit = [&](const VPlan& p) {
    if (p.kind == VPlan::Kind::Source) out.push_back(int(p.i));
  };
  for (const VPlan& p : e.returns) visit(p);
  for (const VPlan& p : e.varargs) visit(p);
  for (auto& [reg, p] : e.regs) visit(p);
  for (const TablePlan& t : e.tables) {
    for (const VPlan& p : t.array) visit(p);
    for (auto& [k, v] : t.hash) visit(k), visit(v);
    visit(t.metatable);
  }
  for (const ClosurePlan& c : e.closures)
    for (const ClosurePlan::Up& u : c.ups) visit(u.fn), visit(u.value);
  for (const Effect& ef : e.effects) visit(ef.target), visit(ef.key), visit(ef.value);
  if (e.lua_backend_ref != LUA_NOREF) out.insert(out.end(), e.input_sources.begin(), e.input_sources.end());
  for (int j : e.number_inputs) out.push_back(e.input_sources[j]);  // never a memo's tensor
  return out;
}


// Pushes the error of fullgraph=true for an entry whose whole frame runs uncompiled.
void push_uncompilable(lua_State* L, const CodeCache* cc, const Entry& e) {
  const std::string msg =
      "tc.compile(fullgraph=true): " + cache_name(cc) + " cannot be compiled: " + e.fallback_reason;
  lua::push_error(L, "CompileError", msg.c_str(), 1);
}

// A backend key as reports show it: a Lua function backend by definition site, no address.
std::string shown_backend(const std::string& key) {
  const size_t at = key.find('#');
  if (at == std::string::npos) return key;
  const size_t end = key.find(' ', at);
  return key.substr(0, at) + (end == std::string::npos ? "" : key.substr(end));
}

// Every entry's failing guard, newest first ("\n  - entry 2: arg[1]: expected ..."), for the
// recompile log, the recompile-limit warning, fail_on_recompile's error and the explain report
// (torch's lists each one, not only the newest's); past `most` entries, "... and N more".
std::string entry_failures(lua_State* L, const CodeCache* cc, const CompileConfig& cfg, int nargs,
                           size_t most = 8) {
  const int base = lua_gettop(L);
  std::string out;
  for (size_t j = cc->entries.size(); j-- > 0;) {
    if (cc->entries.size() - j > most) {
      out += "\n  - ... and " + std::to_string(j + 1) + " more";
      break;
    }
    const Entry& e = *cc->entries[j];
    std::string why = "compiled for backend " + shown_backend(e.backend_key);
    if (e.backend_key == cfg.backend_key) {
      e.guards.check(L, 1, 2, nargs);
      why = e.guards.failure(L, base);
    }
    lua_settop(L, base);
    out += "\n  - entry " + std::to_string(j + 1) + ": " + why;
  }
  return out;
}

// Whether the call (stack: [fn, args...]) hands the function a tensor: an argument, or an upvalue
// of the function. Tables holding tensors (a module) do not count: the trace finds those.
bool tensor_in_call(lua_State* L, int nargs) {
  for (int j = 2; j <= nargs + 1; j++)
    if (lua_type(L, j) == LUA_TUSERDATA && lua::to_tensor(L, j)) return true;
  if (lua_iscfunction(L, 1)) return false;
  for (int n = 1; lua_getupvalue(L, 1, n); n++) {
    const bool t = lua_type(L, -1) == LUA_TUSERDATA && lua::to_tensor(L, -1);
    lua_pop(L, 1);
    if (t) return true;
  }
  return false;
}

// A new entry for a miss (stack: [fn, args...]); null with an outcome when none is made.
Entry* compile_new(lua_State* L, CodeCache* cc, const std::shared_ptr<CompileConfig>& cfg,
                   int nargs, Outcome* out) {
  State& st = state();
  if (!cc->entries.empty()) {
    const int base = lua_gettop(L);
    const Entry& last = *cc->entries.back();
    std::string reason;
    if (last.backend_key != cfg->backend_key && last.guards.check(L, 1, 2, nargs))
      reason = "the backend changed (" + shown_backend(last.backend_key) + " -> " +
               shown_backend(cfg->backend_key) + ")";
    lua_settop(L, base);
    if (reason.empty()) {
      last.guards.check(L, 1, 2, nargs);
      reason = last.guards.failure(L, base);
    }
    lua_settop(L, base);
    // with several entries, each one's failing guard (a single reason blames the newest alone)
    const std::string each =
        cc->entries.size() > 1
            ? "the guard failure of each entry:" + entry_failures(L, cc, *cfg, nargs)
            : reason;
    if (st.stance == "fail_on_recompile") {
      lua_settop(L, base);
      std::string msg = "tc.compiler.set_stance(\"fail_on_recompile\"): " + cache_name(cc) +
                        " would recompile, triggered by " + each;
      lua::push_error(L, "CompileError", msg.c_str(), 1);
      *out = Outcome::Raise;
      return nullptr;
    }
    const int limit = config_int(L, "recompile_limit", 8);
    last.guards.check(L, 1, 2, nargs);
    if (int(cc->entries.size()) >= limit) {
      lua_settop(L, base);
      cc->gave_up = true;
      st.stats.fallbacks++;
      std::string msg = "tc: recompile limit (" + std::to_string(limit) + ") reached for " +
                        cache_name(cc) + ", which runs uncompiled from now on; triggered by " + each;
      // resume functions too (a value read at a break that changes on every call, a loop that
      // breaks in every iteration): compilation is lost either way, and the user is told
      std::fprintf(stderr, "%s\n", msg.c_str());
      st.report.fallbacks.push_back(cache_name(cc) + ": recompile limit reached");
      *out = Outcome::Call;
      return nullptr;
    }
    if (cfg->dynamic != 0) learn_dynamic(L, cc, last, base);
    lua_settop(L, base);
    cc->recompiles++;
    st.stats.recompiles++;
    st.report.recompiles.push_back({cache_name(cc), cc->recompiles, each});
    if (log_enabled(L, "recompiles") && cc->entries.size() == 1)
      std::fprintf(stderr, "[tc recompiles] recompiling %s (entry %d), triggered by: %s\n",
                   cache_name(cc).c_str(), int(cc->entries.size()) + 1, reason.c_str());
    else if (log_enabled(L, "recompiles"))
      std::fprintf(stderr, "[tc recompiles] recompiling %s (entry %d), triggered by %s\n",
                   cache_name(cc).c_str(), int(cc->entries.size()) + 1, each.c_str());
  }
  auto t0 = std::chrono::steady_clock::now();
  Tracer::Options opt;
  opt.fn_name = cc->name;
  if (cfg->dynamic != 0) opt.dynamic = cc->dynamic;  // dynamic = false: every size specialized
  opt.dynamic_all = cfg->dynamic == 1;
  opt.budget.instructions = config_int(L, "trace_max_instructions", opt.budget.instructions);
  opt.budget.depth = config_int(L, "trace_max_depth", opt.budget.depth);
  opt.budget.iterations = config_int(L, "trace_max_iterations", opt.budget.iterations);
  opt.budget.guards = config_int(L, "trace_max_guards", opt.budget.guards);
  opt.budget.memory_mb = config_int(L, "trace_max_memory_mb", opt.budget.memory_mb);
  opt.budget.ms = config_int(L, "trace_max_ms", opt.budget.ms);
  // Dynamo's skip of frames without tensor work: on by default under --compile-all (where most
  // functions are plain Lua), for a call that hands the function no tensor; never under fullgraph
  if (!cfg->fullgraph && !cc->tensor_work && !tensor_in_call(L, nargs))
    opt.budget.pure_lua =
        std::max(0, config_int(L, "trace_pure_lua_instructions", st.compile_all ? 2000 : 0));
  std::unique_ptr<Entry> e;
  for (int attempt = 0;; attempt++) {
    e = std::make_unique<Entry>();
    e->backend_key = cfg->backend_key;
    Tracer t(L, cc->proto, *cc->analysis, 1, nargs, *e, opt);
    try {
      t.run();
      break;
    } catch (const Tracer::RestartAt& r) {
      if (attempt >= 4 || r.pc == opt.forced_break_pc) {
        e->brk = r.brk;
        make_fallback(*e, "tracing did not settle on a break point");
        break;
      }
      opt.forced_break_pc = r.pc;
      opt.forced = r.brk;
    }
  }
  st.stats.traces++;
  for (size_t j = 0; j < e->graph.inputs.size(); j++)
    if (e->graph.fake(Ref{e->graph.inputs[j]}).is_wrapped_number()) e->number_inputs.push_back(int(j));
  if (e->end == EndKind::Break) {
    // make (and verify) the resume functions now: a failure here can still run the frame
    // uncompiled, which it no longer can once the graph has run
    try {
      for (int p : e->resume_pcs) resume_cache(cc, p);
    } catch (const vm::BytecodeError& err) {
      make_fallback(*e, err.what());
    }
  }
  const double trace_ms = ms_since(t0);
  if (e->end == EndKind::Break || (e->end == EndKind::Fallback && !e->brk.stack.empty())) {
    const vm::Ins bi = vm::decode(cc->proto->code[e->end == EndKind::Break ? e->pc : 0]);
    if (e->end == EndKind::Fallback)
      e->brk.action = "the function runs uncompiled: " + e->fallback_reason;
    else if (e->resume_uncompiled)
      e->brk.action =
          "the graph so far runs, then the rest of the function runs uncompiled from this "
          "instruction";
    else if (e->brk.stack.size() > 1)
      e->brk.action =
          "the break is inside a called function: the graph so far runs, the call runs through the "
          "compiler (its own graphs), then a resume function continues after it";
    else if (e->index_at_break)
      e->brk.action =
          "the graph so far runs, the indexing runs at the break (an __index or __newindex "
          "function through the compiler), then a resume function continues after it";
    else if (bi.op == vm::OpCode::CALL || bi.op == vm::OpCode::TAILCALL)
      e->brk.action =
          "the graph so far runs, the call runs in stock Lua, then a resume function continues "
          "after it";
    else
      e->brk.action =
          "the graph so far runs, the test runs in stock Lua, then the resume function of the "
          "branch taken continues";
    st.stats.graph_breaks++;
    st.report.breaks.push_back(e->brk);
    if (log_enabled(L, "graph_breaks")) {
      std::string where = e->brk.stack.empty() ? "?" : e->brk.where();
      std::fprintf(stderr, "[tc graph_breaks] graph break in %s at %s: %s\n",
                   cache_name(cc).c_str(), where.c_str(), e->brk.reason().c_str());
    }
    if (cfg->fullgraph) {
      raise_graph_break(L, e->brk);
      *out = Outcome::Raise;
      return nullptr;
    }
  }
  if (e->end == EndKind::Fallback) {
    st.stats.fallbacks++;
    st.report.fallbacks.push_back(cache_name(cc) + ": " + e->fallback_reason);
    if (cfg->fullgraph && e->brk.stack.empty()) {
      push_uncompilable(L, cc, *e);
      *out = Outcome::Raise;
      return nullptr;
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  CompileReport report;
  e->trains = e->end != EndKind::Fallback && cfg->backend_fn_ref == LUA_NOREF && is_training_graph(e->graph);
  if (e->trains) {
    // its forward and backward are compiled at its first call (training.cpp)
    st.report.graphs.push_back({cache_name(cc), e->graph.op_names(), e->graph.print_code(), report});
  } else if (e->end != EndKind::Fallback && e->graph.num_ops() > 0) {
    const int base = lua_gettop(L);
    if (cfg->backend_fn_ref != LUA_NOREF) {
      // example inputs: the real tensors of this call
      e->guards.check(L, 1, 2, nargs);
      std::vector<int> slots;
      for (int s : e->input_sources) slots.push_back(GuardProgram::slot(base, s));
      e->lua_backend_ref = lua_backend_compile(L, cfg->backend_fn_ref, e->graph, slots, e->number_inputs);
      if (e->lua_backend_ref == LUA_NOREF) {  // its error is on top: keep it for the raise
        lua_insert(L, base + 1);
        lua_settop(L, base + 1);
        *out = Outcome::Raise;
        return nullptr;
      }
      lua_settop(L, base);
    } else {
      TC_CHECK(st.compiler.compile, CompileError,
               "no graph compiler is installed (tc::capture::install was given none)");
      CompileOptions options = cfg->backend_options();
      options.cudagraph_max_sizes = config_int(L, "cudagraph_max_sizes", options.cudagraph_max_sizes);
      Compiled c = st.compiler.compile(e->graph, cfg->backend, options);
      e->run = std::move(c.run);
      report = std::move(c.report);
      note_backend_report(L, cache_name(cc), report);
    }
    st.stats.backend_compiles++;
    st.report.graphs.push_back({cache_name(cc), e->graph.op_names(), e->graph.print_code(), report});
    if (log_enabled(L, "graph_code"))
      std::fprintf(stderr, "[tc graph_code] %s\n%s", cache_name(cc).c_str(),
                   e->graph.print_code().c_str());
  }
  const double backend_ms = ms_since(t1);
  st.stats.trace_ms += trace_ms;
  st.stats.backend_ms += backend_ms;
  st.report.times.push_back({cache_name(cc), trace_ms, backend_ms, report.lower_ms,
                             report.codegen_ms, report.compile_ms});
  e->guards.needed = sources_read_after_check(*e);
  if (log_enabled(L, "guards")) {
    std::fprintf(stderr, "[tc guards] %s\n", cache_name(cc).c_str());
    for (const std::string& l : guard_listing(e->guards.texts()))
      std::fprintf(stderr, "  %s\n", l.c_str());
  }
  cc->entries.push_back(std::move(e));
  if (auto keep = st.caches.find(cc->key); keep != st.caches.end())
    st.report.guards.push_back({cache_name(cc), keep->second, cc->entries.size() - 1});
  return cc->entries.back().get();
}

Outcome drive_from(lua_State* L, CodeCache* cc, const std::shared_ptr<CompileConfig>& cfg);

// Tracing or compiling failed for a reason of tc's own (stack: [fn, args...]): the function runs
// uncompiled from now on (its entries made so far still serve), with one log line; an error
// under fullgraph=true.
Outcome give_up_compiling(lua_State* L, CodeCache* cc, const std::shared_ptr<CompileConfig>& cfg,
                          const std::exception& err) {
  State& st = state();
  const std::string why = dynamic_cast<const TraceLimit*>(&err)
                              ? std::string(err.what())
                              : "tc internal error while compiling: " + std::string(err.what());
  if (cfg->fullgraph) {
    const std::string msg =
        "tc.compile(fullgraph=true): " + cache_name(cc) + " cannot be compiled: " + why;
    lua::push_error(L, "CompileError", msg.c_str(), 1);
    return Outcome::Raise;
  }
  cc->gave_up = true;
  st.stats.fallbacks++;
  st.report.fallbacks.push_back(cache_name(cc) + ": " + why);
  std::fprintf(stderr, "tc: %s runs uncompiled: %s\n", cache_name(cc).c_str(), why.c_str());
  return Outcome::Call;
}

// A trace of cc ran `w.instructions` without a tensor (NoTensorWork): the function is marked so
// (CodeCache::pure_lua), counted, reported (explain's uncompiled list) and logged (TC_LOGS=skips).
void skip_pure_lua(lua_State* L, CodeCache* cc, const NoTensorWork& w, double trace_ms) {
  State& st = state();
  cc->pure_lua = true;
  cc->pure_lua_steps = w.instructions;
  st.stats.traces++;
  st.stats.pure_lua_skips++;
  st.stats.trace_ms += trace_ms;
  const std::string why = "skipped: no tensor work in " + std::to_string(w.instructions) +
                          " instructions (tc.config.trace_pure_lua_instructions); calls without a "
                          "tensor argument or upvalue run uncompiled";
  st.report.fallbacks.push_back(cache_name(cc) + ": " + why);
  if (log_enabled(L, "skips"))
    std::fprintf(stderr, "[tc skips] %s %s\n", cache_name(cc).c_str(), why.c_str());
}

// While a call run uncompiled by that skip is running (stock Lua: so are the Lua functions it
// calls), the first tensor op run from Lua (lua::g_tensor_work_hook) says, once per function,
// that its tensor work runs uncompiled, and the function is no longer skipped: its next call
// traces, unbounded by trace_pure_lua_instructions (a loop calling it compiles from its second
// call on). Costs nothing unless such a call is running.
void on_tensor_work(lua_State*) {
  State& st = state();
  if (st.skipped_active.empty() || std::this_thread::get_id() != st.skip_thread) return;
  CodeCache* cc = st.skipped_active.back().get();
  if (cc->tensor_work) return;
  cc->tensor_work = true;
  cc->pure_lua = false;
  std::fprintf(stderr,
               "tc: tensor work in %s runs uncompiled: it was skipped after %d instructions "
               "without tensor work (tc.config.trace_pure_lua_instructions; 0 compiles it)\n",
               cache_name(cc).c_str(), cc->pure_lua_steps);
}

// __close of the marker run_as_skipped hands the call: the call ended (returned or raised)
int skipped_call_closed(lua_State*) {
  State& st = state();
  if (!st.skipped_active.empty()) st.skipped_active.pop_back();
  if (st.skipped_active.empty()) lua::g_tensor_work_hook = nullptr;
  return 0;
}

// The call (stack: [fn, args...]) runs cc uncompiled as skipped: the stack becomes [runner,
// marker, fn, args...], the runner calling fn with the marker a to-be-closed variable, so that
// cc is on State::skipped_active exactly while the call runs, an error included.
void run_as_skipped(lua_State* L, CodeCache* cc) {
  State& st = state();
  auto it = st.caches.find(cc->key);
  if (it == st.caches.end() || it->second.get() != cc || !lua_checkstack(L, 4)) return;
  if (lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.skipped_runner") != LUA_TFUNCTION) {
    lua_pop(L, 1);
    const char* src = "return function(m, f, ...) local _ <close> = m return f(...) end";
    if (luaL_loadbuffer(L, src, std::strlen(src), "@[tc]/compile.lua") != LUA_OK) lua_error(L);
    lua_call(L, 0, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.skipped_runner");
    lua_newuserdatauv(L, 0, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, skipped_call_closed);
    lua_setfield(L, -2, "__close");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.skipped_marker");
  }
  lua_insert(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.skipped_marker");
  lua_insert(L, 2);
  if (st.skipped_active.empty()) st.skip_thread = std::this_thread::get_id();
  st.skipped_active.push_back(it->second);
  lua::g_tensor_work_hook = on_tensor_work;
}

Outcome drive(lua_State* L, CompiledFn& cf) {
  State& st = state();
  if (st.stance == "force_eager") return Outcome::Call;
  if (cf.generation != st.generation || !cf.cc) {
    cf.cc = cache_for(L, 1, cf);
    cf.generation = st.generation;
  }
  return drive_from(L, cf.cc, cf.cfg);
}

Outcome drive_from(lua_State* L, CodeCache* cc, const std::shared_ptr<CompileConfig>& cfg) {
  State& st = state();
  for (;;) {
    if (!cc) return Outcome::Call;
    const int nargs = lua_gettop(L) - 1;
    Entry* hit = nullptr;
    int base = lua_gettop(L);
    for (auto& e : cc->entries) {
      if (e->backend_key != cfg->backend_key) continue;
      if (e->guards.check(L, 1, 2, nargs)) {
        hit = e.get();
        break;
      }
      lua_settop(L, base);
    }
    if (hit && cfg->fullgraph && (hit->end == EndKind::Break || hit->end == EndKind::Fallback)) {
      // an entry made by a compile without fullgraph (caches are per function, shared by every
      // tc.compile of it): under fullgraph=true its break is an error, as when first traced
      lua_settop(L, base);
      if (hit->end == EndKind::Break || !hit->brk.stack.empty())
        raise_graph_break(L, hit->brk);
      else
        push_uncompilable(L, cc, *hit);
      return Outcome::Raise;
    }
    if (hit) {
      st.stats.cache_hits++;
      if (hit->guards.last_fast_) st.stats.guard_fast_hits++;
      cc->hits++;
    } else {
      // past the recompile limit the entries made so far still run; misses run uncompiled
      if (cc->gave_up) {
        lua_settop(L, base);
        return Outcome::Call;
      }
      // a function found to do no tensor work: a call without tensors runs it uncompiled
      if (cc->pure_lua && !cfg->fullgraph && !tensor_in_call(L, nargs)) {
        lua_settop(L, base);
        st.stats.pure_lua_calls++;
        run_as_skipped(L, cc);
        return Outcome::Call;
      }
      Outcome o;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        hit = compile_new(L, cc, cfg, nargs, &o);
      } catch (const NoTensorWork& w) {
        // nothing of the call has happened (the trace is symbolic): run it uncompiled from its
        // start, and remember it for the calls that follow
        lua_settop(L, base);
        skip_pure_lua(L, cc, w, ms_since(t0));
        run_as_skipped(L, cc);
        return Outcome::Call;
      } catch (const Error&) {
        throw;  // a user's mistake or the backend's error: raised as its kind
      } catch (const std::exception& e) {
        // a bound of the trace's cost (TraceLimit), out of memory, a bug: never the program's end
        lua_settop(L, base);
        return give_up_compiling(L, cc, cfg, e);
      }
      if (!hit) return o;
      if (!hit->guards.check(L, 1, 2, nargs)) {
        // cannot happen for a sound trace; run uncompiled rather than wrong
        lua_settop(L, base);
        return Outcome::Call;
      }
    }
    Outcome o = execute(L, *hit, cc, cfg, base);
    if (o != Outcome::Call) return o;
  }
}

}  // namespace

Tensor number_input(lua_State* L, int idx) {
  if (lua_isinteger(L, idx)) return Tensor::scalar_int(lua_tointeger(L, idx), DType::Int64, true);
  return Tensor::scalar(lua_tonumber(L, idx), DType::Float64, true);
}

std::string state_prefix(lua_State* L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p/", lua_topointer(L, -1));
  lua_pop(L, 1);
  return buf;
}

CodeCache* cache_for(lua_State* L, int fn_idx, const CompiledFn& cf) {
  std::string k;
  const vm::Proto* p = Tracer::proto_of(L, fn_idx, &k);
  // Entries hold registry references: each Lua state has its own caches.
  k += cf.cfg->code_key;
  const std::string key = state_prefix(L) + k;
  auto& caches = state().caches;
  auto it = caches.find(key);
  if (it != caches.end()) return it->second.get();
  auto c = std::make_shared<CodeCache>();
  c->key = key;
  c->disk_key = k;  // the same without this process's state pointer
  c->remember = config_bool(L, "remember_dynamic", true);
  if (c->remember) c->dynamic = read_remembered(c->disk_key);
  c->proto = p;
  c->analysis = std::make_shared<vm::Analysis>(vm::analyze(*p));
  lua_Debug ar;
  lua_pushvalue(L, fn_idx);
  lua_getinfo(L, ">S", &ar);
  c->name = "function <" + std::string(ar.short_src) + ":" + std::to_string(ar.linedefined) + ">";
  // a function of tc's own (a module's forward, the module wrapper) is named by the user's call
  if (!cf.name.empty())
    c->name = cf.name;
  else if (std::strncmp(ar.short_src, "[tc]", 4) == 0 && !cf.cfg->where.empty())
    c->name += " (tc.compile at " + cf.cfg->where + ")";
  c->fn_name = c->name;
  if (!c->dynamic.empty() && log_enabled(L, "recompiles")) {
    std::string dims;
    for (const auto& [src, d] : c->dynamic) dims += (dims.empty() ? "" : ", ") + src + (d < 0 ? "" : " dim " + std::to_string(d + 1));
    std::fprintf(stderr, "[tc recompiles] %s starts with what turned dynamic in an earlier run: %s (%s; --no-cache forgets)\n",
                 c->name.c_str(), dims.c_str(), remembered_path(c->disk_key).c_str());
  }
  CodeCache* out = c.get();
  caches[c->key] = std::move(c);
  return out;
}

std::vector<Report::CacheRec> cache_records() {
  std::vector<Report::CacheRec> out;
  for (auto& [key, cc] : state().caches)
    if (!cc->entries.empty())
      out.push_back({cc->name, int(cc->entries.size()), cc->hits, cc->gave_up});
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.function < b.function; });
  return out;
}

namespace {
// Runs `body` (which returns an Outcome) as a Lua C function's body: C++ errors become Lua
// errors of their kind (the stack unwinds first, so no C++ object outlives lua_error's longjmp).
template <class Body>
int run_outcome(lua_State* L, Body body) {
  Outcome o = Outcome::Call;
  bool cpp_error = false;
  char kind[32] = "CompileError";
  char msg[1024] = "";
  try {
    o = body();
  } catch (const Error& e) {
    cpp_error = true;
    std::snprintf(kind, sizeof kind, "%s", error_kind_name(e.kind()));
    std::snprintf(msg, sizeof msg, "%s", e.what());
  } catch (const std::exception& e) {
    cpp_error = true;
    std::snprintf(msg, sizeof msg, "tc internal error while compiling: %s", e.what());
  }
  if (cpp_error) {
    lua::push_error(L, kind, msg, 1);
    return lua_error(L);
  }
  if (o == Outcome::Raise) return lua_error(L);
  return lua_gettop(L);
}
}  // namespace

int l_after_call(lua_State* L) {
  // stack: cont, results...
  return run_outcome(L, [L] {
    Cont* c = static_cast<Cont*>(lua_touserdata(L, 1));
    std::shared_ptr<CodeCache> keep = c->cc;
    std::shared_ptr<CompileConfig> cfg = c->cfg;
    CodeCache* cc = keep.get();
    const vm::Ins i = vm::decode(cc->proto->code[c->pc]);
    const int nres = lua_gettop(L) - 1;
    lua_getiuservalue(L, 1, 1);
    const int R = lua_gettop(L);
    lua_getiuservalue(L, 1, 2);
    const int VA = lua_gettop(L);
    lua_getiuservalue(L, 1, 3);
    const int F = lua_gettop(L);
    // a CALL's results; an indexing run at the break (index_at_break) delivers one, to R[A], a
    // write none
    const int want = i.op == vm::OpCode::CALL ? (i.c ? i.c - 1 : nres) : is_write(i.op) ? 0 : 1;
    for (int j = 0; j < want; j++) {
      if (j < nres)
        lua_pushvalue(L, 2 + j);
      else
        lua_pushnil(L);
      lua_rawseti(L, R, i.a + 1 + j);
    }
    const int top = i.a + nres;
    const int pc = c->pc;
    push_resume_call(L, cc, F, R, VA, top, pc + 1, false);
    return drive_from(L, cc, cfg);
  });
}

// Recursion through compiled functions: Lua's own "stack overflow" would be raised in tc's
// wrapper ([tc]/compile.lua:4). Past this many free slots it is raised here instead, as eager Lua
// raises it (a string), at the user's line: the nearest frame that is not tc's.
constexpr int kStackMargin = 1000;

int raise_stack_overflow(lua_State* L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline > 0 && std::strncmp(ar.source, "@[tc]/", 6) != 0) {
      lua_pushfstring(L, "%s:%d: stack overflow", ar.short_src, ar.currentline);
      return lua_error(L);
    }
  }
  lua_pushstring(L, "stack overflow");
  return lua_error(L);
}

// A coroutine's stack is checked once the coroutine is kDeepFrames calls deep (lua_getstack walks
// at most that many frames): checked from its first call, a coroutine's small stack would grow by
// the margin for the check alone; that deep, it holds about as many slots already.
constexpr int kDeepFrames = 100;

bool stack_has_margin(lua_State* L) {
  const bool main_thread = lua_pushthread(L);
  lua_pop(L, 1);
  lua_Debug ar;
  if (!main_thread && !lua_getstack(L, kDeepFrames, &ar)) return true;
  return lua_checkstack(L, kStackMargin);
}

int l_dispatch(lua_State* L) {
  if (!stack_has_margin(L)) return raise_stack_overflow(L);
  auto* cf = static_cast<CompiledFn*>(lua_touserdata(L, 1));
  lua_getiuservalue(L, 1, 1);
  lua_replace(L, 1);
  return run_outcome(L, [L, cf] { return drive(L, *cf); });
}

}  // namespace tc::capture
