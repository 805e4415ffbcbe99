// split_check: runs each test case uninterrupted and split at every legal resume pc, comparing.
//
// How a run is "split" at pc p of a function F (the case's function or one nested in it):
//   * F's proto is replaced, inside a copy of the case function's proto tree, by a *prefix*:
//     F's code with the instruction at p replaced by a JMP to an epilogue (split_prefix.cpp).
//     The epilogue creates the synthesized resume closure (a nested proto of the prefix whose
//     upvalues are the prefix's own, so it shares F's upvalue cells) and calls
//     handoff(resume, live registers..., [varargs | packed open results]).
//   * handoff (C, below) counts the hand-over and lua_pcallk's the resume function, so the rest
//     of F runs in the resume function only; yields pass through. It returns (ok, results...).
//   * The epilogue then overwrites the prefix's to-be-closed slots with a no-op closer (the
//     resume function already closed the real ones) and calls finish(ok, ...), which returns the
//     results or re-raises the error, so callers see exactly what F would have produced.
//   * Open results at p are packed with table.pack by a CALL placed between the producer and p
//     (the prefix only; harmless because the harness sets no debug hooks).
// Each run loads the cases file afresh in a new environment whose print appends to a log; the
// results (or error), the log and the globals written are serialized and compared with those
// of an uninterrupted run. A pc the case never reaches is counted as "not reached".
//
// Known differences that the corpus avoids: error(msg, 2) inside a resumed nested function
// blames handoff instead of the Lua caller; tostring() of tables and functions shows addresses;
// Lua 5.4.4 raises integer "// 0" and "% 0" errors without saving the pc, so their line is
// whatever pc the frame saved last, which differs between the original and the resume frame.
#include <lua.hpp>

#include <cstdlib>
#include <sstream>

#include "dump.h"
#include "resume.h"
#include "split_prefix.h"
#include "tc/config.h"
#include "tc/vm/bytecode.h"
#include "verifier.h"

namespace tc::vm {
namespace {

const char* const kHarness = R"lua(
local H = {}
function H.finish(ok, ...) if ok then return ... end error((...), 0) end
H.noop = setmetatable({}, {__close = function() end})
H.pack = table.pack

local function ser(v, seen)
  local t = type(v)
  if t == "number" then
    if math.type(v) == "integer" then return "i" .. string.format("%d", v) end
    return "f" .. string.format("%.17g", v)
  elseif t == "string" then return string.format("%q", v)
  elseif t ~= "table" then return t == "boolean" and tostring(v) or t
  end
  seen = seen or {}
  if seen[v] then return "<cycle>" end
  seen[v] = true
  local items = {}
  for k, x in pairs(v) do items[#items + 1] = ser(k, seen) .. "=" .. ser(x, seen) end
  table.sort(items)
  seen[v] = nil
  return "{" .. table.concat(items, ",") .. "}"
end

local function fresh(path)
  local env = setmetatable({}, {__index = _G})
  local log = {}
  env.print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    log[#log + 1] = table.concat(t, "\t", 1, t.n)
  end
  local chunk = assert(loadfile(path, "t", env))
  local cases = chunk()
  assert(type(cases) == "table", path .. " must return a table of cases {fn, args...}")
  return cases, env, log
end

function H.cases(path) return (fresh(path)) end

function H.run(path, index, substitute)
  local cases, env, log = fresh(path)
  local case = cases[index]
  local fn = case[1]
  if substitute then fn = substitute(fn) end
  local res = table.pack(pcall(fn, table.unpack(case, 2, case.n or #case)))
  env.print = nil
  return ser(res) .. "\nlog " .. ser(log) .. "\nglobals " .. ser(env)
end
return H
)lua";

int handoff_done(lua_State* L, int status, lua_KContext) {
  lua_pushboolean(L, status == LUA_OK || status == LUA_YIELD);
  lua_insert(L, 1);
  return lua_gettop(L);
}

// handoff(resume, registers..., [packed open results]) -> ok, results...
int handoff(lua_State* L) {
  ++*static_cast<int*>(lua_touserdata(L, lua_upvalueindex(1)));
  if (lua_toboolean(L, lua_upvalueindex(2))) {
    const int packed = lua_gettop(L);
    lua_getfield(L, packed, "n");
    const int n = int(lua_tointeger(L, -1));
    lua_pop(L, 1);
    luaL_checkstack(L, n + 1, "split-check: too many open results");
    for (int i = 1; i <= n; i++) lua_geti(L, packed, i);
    lua_remove(L, packed);
  }
  return handoff_done(L, lua_pcallk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, 0, handoff_done), 0);
}

// substitute(fn) -> the split root closure sharing fn's upvalues. Upvalues: chunk bytes, handoff,
// harness table.
int substitute(lua_State* L) {
  size_t len;
  const char* bytes = lua_tolstring(L, lua_upvalueindex(1), &len);
  if (luaL_loadbufferx(L, bytes, len, "=split", "b") != LUA_OK) return lua_error(L);
  lua_Debug ar;
  lua_pushvalue(L, 1);
  lua_getinfo(L, ">u", &ar);
  const int nup = ar.nups;
  for (int i = 1; i <= nup; i++) lua_upvaluejoin(L, -1, i, 1, i);
  const char* fields[kSplitUpvalues] = {"finish", nullptr, "pack", nullptr, "noop"};
  for (int j = 0; j < kSplitUpvalues; j++) {
    if (j == kSplitHandoff)
      lua_pushvalue(L, lua_upvalueindex(2));
    else if (fields[j])
      lua_getfield(L, lua_upvalueindex(3), fields[j]);
    else
      lua_pushnil(L);
    lua_setupvalue(L, -2, nup + 1 + j);
  }
  return 1;
}

struct Tally {
  int points = 0, passed = 0, failed = 0, unreached = 0, refused = 0, untestable = 0;
};

// TC_DEBUG >= 2 also lists why each refused or untestable pc was skipped.
bool debug_reasons() {
  return tc::debug_level() >= 2;
}

class SplitCheck {
 public:
  SplitCheck(lua_State* L, const char* path, std::ostream& out) : L_(L), path_(path), out_(out) {}
  int run();

 private:
  std::string run_case(int index, const std::string* chunk, bool open, int* handoffs);
  void check_function(int index, const Proto& root, const std::vector<int>& path, const Proto& f,
                      const std::string& expected);
  void walk(int index, const Proto& root, std::vector<int>& path, const Proto& f,
            const std::string& expected);

  lua_State* L_;
  const char* path_;
  std::ostream& out_;
  int harness_ = 0;  // stack index of the harness table
  int passed_ = 0, failed_ = 0;
};

std::string SplitCheck::run_case(int index, const std::string* chunk, bool open, int* handoffs) {
  lua_getfield(L_, harness_, "run");
  lua_pushstring(L_, path_);
  lua_pushinteger(L_, index);
  if (chunk) {
    lua_pushlstring(L_, chunk->data(), chunk->size());
    lua_pushlightuserdata(L_, handoffs);
    lua_pushboolean(L_, open);
    lua_pushcclosure(L_, handoff, 2);
    lua_pushvalue(L_, harness_);
    lua_pushcclosure(L_, substitute, 3);
  } else {
    lua_pushnil(L_);
  }
  if (lua_pcall(L_, 3, 1, 0) != LUA_OK) {
    std::string msg = lua_tostring(L_, -1) ? lua_tostring(L_, -1) : "?";
    lua_pop(L_, 1);
    return "harness error: " + msg;
  }
  std::string result = lua_tostring(L_, -1);
  lua_pop(L_, 1);
  return result;
}

void SplitCheck::check_function(int index, const Proto& root, const std::vector<int>& path,
                                const Proto& f, const std::string& expected) {
  Tally t;
  std::ostringstream failures;
  const Analysis a = analyze(f);
  const std::vector<int> lines = decode_lines(f);
  for (const ResumePoint& point : resume_points(f)) {
    t.points++;
    auto fail = [&](const std::string& why) {
      t.failed++;
      failures << "    pc " << point.pc + 1 << " [line " << lines[point.pc] << "]: " << why << "\n";
    };
    auto skip = [&](int& counter, const std::string& why) {
      counter++;
      if (debug_reasons()) failures << "    pc " << point.pc + 1 << " skipped: " << why << "\n";
    };
    ResumePlan plan = plan_resume(f, a, point.pc);
    if (!plan.ok()) {
      skip(t.refused, plan.refusal);
      continue;
    }
    try {
      Proto resume = synthesize_resume(f, plan);
      std::vector<VerifyIssue> issues = verify(resume);
      if (!issues.empty()) {
        fail("resume function fails verification: " + issues[0].message);
        continue;
      }
      SplitRoot split = build_split_root(root, path, plan, resume);
      if (!split.refusal.empty()) {
        skip(t.untestable, split.refusal);
        continue;
      }
      issues = verify(split.root, {.allow_top_gap = true});
      if (!issues.empty()) {
        fail("prefix fails verification: " + issues[0].message);
        continue;
      }
      std::string chunk = write_chunk(split.root);
      int handoffs = 0;
      std::string got = run_case(index, &chunk, plan.open_results, &handoffs);
      if (handoffs == 0 && got == expected) {
        t.unreached++;
      } else if (got == expected) {
        t.passed++;
      } else {
        fail("expected\n" + expected + "\n    got\n" + got);
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  passed_ += t.passed;
  failed_ += t.failed;
  out_ << "case " << index << " " << describe(f) << ": " << t.points << " resume points, "
       << t.passed << " passed, " << t.failed << " failed, " << t.unreached << " not reached, "
       << t.refused << " refused, " << t.untestable << " untestable\n"
       << failures.str();
}

void SplitCheck::walk(int index, const Proto& root, std::vector<int>& path, const Proto& f,
                      const std::string& expected) {
  check_function(index, root, path, f, expected);
  for (size_t i = 0; i < f.protos.size(); i++) {
    path.push_back(int(i));
    walk(index, root, path, f.protos[i], expected);
    path.pop_back();
  }
}

int SplitCheck::run() {
  const int base = lua_gettop(L_);
  if (luaL_loadstring(L_, kHarness) != LUA_OK || lua_pcall(L_, 0, 1, 0) != LUA_OK) {
    out_ << "split-check: harness failed to load: " << lua_tostring(L_, -1) << "\n";
    lua_settop(L_, base);
    return 1;
  }
  harness_ = lua_gettop(L_);
  lua_getfield(L_, harness_, "cases");
  lua_pushstring(L_, path_);
  if (lua_pcall(L_, 1, 1, 0) != LUA_OK) {
    out_ << "split-check: " << lua_tostring(L_, -1) << "\n0 passed, 1 failed\n";
    lua_settop(L_, base);
    return 1;
  }
  const int cases = lua_gettop(L_);
  const int count = int(luaL_len(L_, cases));
  for (int index = 1; index <= count; index++) {
    lua_geti(L_, cases, index);
    lua_geti(L_, -1, 1);
    std::string bytes;
    try {
      bytes = dump_function(L_);
    } catch (const std::exception& e) {
      out_ << "case " << index << ": " << e.what() << "\n";
      failed_++;
      lua_pop(L_, 2);
      continue;
    }
    lua_pop(L_, 2);
    std::string expected = run_case(index, nullptr, false, nullptr);
    Proto root = read_chunk(bytes);
    std::vector<int> path;
    walk(index, root, path, root, expected);
  }
  lua_settop(L_, base);
  out_ << passed_ << " passed, " << failed_ << " failed\n";
  return failed_ == 0 ? 0 : 1;
}

}  // namespace

int split_check(lua_State* L, const char* path, std::ostream& out) {
  return SplitCheck(L, path, out).run();
}

}  // namespace tc::vm
