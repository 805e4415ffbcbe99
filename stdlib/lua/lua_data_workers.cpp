// tc._C.data_workers: the DataLoader's worker threads (tc.utils.data.lua, num_workers > 0). Each
// worker has its own Lua state with tc opened and the main state's package.path, so item code in
// Lua runs in parallel with the main thread. Values cross between states as Boxes (copies of
// plain Lua values; tensors are shared, not copied); tc.utils.data encodes datasets and batches
// into such plain values and back.
//
// Protocol (tc.utils.data.lua): pool = data_workers(n, spec); each worker calls
// require("tc.utils.data")._worker_boot(spec, id, n) -> fetch; pool:submit(tag, value[, worker])
// queues a task for fetch(value) (any worker, or worker 1..n); pool:take(tag[, timeout]) waits for that task's result (true, value or false, error message);
// pool:clear(min_tag) drops queued tasks and results (and later results) of older tags;
// pool:close() (also __gc) stops and joins the threads and closes their states. Lua code running
// in a worker when the pool closes is interrupted (a hook set then raises "cancelled", as lua.c
// stops a script on Ctrl-C), so closing after an error or a timeout does not wait for the other
// workers' items; a tc op in progress finishes first. No hook is set before: a Lua hook makes
// every instruction slower.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "lua_binding.h"

extern "C" int tc_open_library(lua_State* L);

namespace tc::lua {
namespace {

struct Box {
  enum Kind { Nil, Bool, Int, Num, Str, TensorV, Table } kind = Nil;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  Tensor t;
  std::vector<std::pair<Box, Box>> fields;
};

// The Lua value at idx as a Box; throws ValueError for what cannot cross (functions, userdata
// other than tensors, tables with metatables: tc.utils.data encodes those first).
Box to_box(lua_State* L, int idx, int depth) {
  TC_CHECK(depth < 200, ValueError, "DataLoader worker: value nested more than 200 tables deep (a cycle?)");
  idx = lua_absindex(L, idx);
  Box b;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return b;
    case LUA_TBOOLEAN: b.kind = Box::Bool, b.b = lua_toboolean(L, idx); return b;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) b.kind = Box::Int, b.i = lua_tointeger(L, idx);
      else b.kind = Box::Num, b.d = lua_tonumber(L, idx);
      return b;
    case LUA_TSTRING: {
      size_t n;
      const char* p = lua_tolstring(L, idx, &n);
      b.kind = Box::Str, b.s.assign(p, n);
      return b;
    }
    case LUA_TTABLE: {
      TC_CHECK(!lua_getmetatable(L, idx), ValueError,
               "DataLoader worker: cannot pass a table with a metatable between Lua states (internal: encode it first)");
      TC_CHECK(lua_checkstack(L, 4), ValueError, "DataLoader worker: value nested too deep");
      b.kind = Box::Table;
      lua_pushnil(L);
      while (lua_next(L, idx)) {
        Box k = to_box(L, -2, depth + 1);
        b.fields.emplace_back(std::move(k), to_box(L, -1, depth + 1));
        lua_pop(L, 1);
      }
      return b;
    }
    default:
      if (const Tensor* t = to_tensor(L, idx)) {
        b.kind = Box::TensorV, b.t = *t;
        return b;
      }
      TC_FAIL(ValueError, "DataLoader worker: cannot pass a %s between Lua states (tensors, numbers, strings, booleans and tables can)",
              luaL_typename(L, idx));
  }
}

void push_box(lua_State* L, const Box& b) {
  TC_CHECK(lua_checkstack(L, 4), ValueError, "DataLoader worker: value nested too deep");
  switch (b.kind) {
    case Box::Nil: lua_pushnil(L); return;
    case Box::Bool: lua_pushboolean(L, b.b); return;
    case Box::Int: lua_pushinteger(L, b.i); return;
    case Box::Num: lua_pushnumber(L, b.d); return;
    case Box::Str: lua_pushlstring(L, b.s.data(), b.s.size()); return;
    case Box::TensorV: push_tensor(L, b.t); return;
    case Box::Table:
      lua_createtable(L, 0, (int)b.fields.size());
      for (auto& [k, v] : b.fields) {
        push_box(L, k);
        push_box(L, v);
        lua_rawset(L, -3);
      }
      return;
  }
}

struct Result {
  bool ok;
  Box value;
  std::string error;
};

constexpr const char* kCancelKey = "tc.data_worker_cancel";

void cancel_hook(lua_State* W, lua_Debug*) {
  lua_getfield(W, LUA_REGISTRYINDEX, kCancelKey);
  auto* cancel = static_cast<std::atomic<bool>*>(lua_touserdata(W, -1));
  lua_pop(W, 1);
  if (cancel && cancel->load()) luaL_error(W, "cancelled: the DataLoader's workers are stopping");
}

struct Pool {
  std::mutex mu;
  std::condition_variable task_cv, result_cv;
  struct Task {
    int64_t tag;
    int worker;  // 0-based; -1: any
    Box value;
  };
  std::deque<Task> tasks;
  // The first queued task this worker may take, or end().
  std::deque<Task>::iterator next_for(int id) {
    return std::find_if(tasks.begin(), tasks.end(), [&](const Task& t) { return t.worker < 0 || t.worker == id; });
  }
  std::map<int64_t, Result> results;
  int64_t min_tag = 0;
  bool stop = false;
  std::atomic<bool> cancel{false};
  std::vector<lua_State*> states;
  std::vector<std::thread> threads;
  Box spec;

  void close() {
    {
      std::lock_guard g(mu);
      stop = true;
    }
    cancel = true;
    for (lua_State* W : states) lua_sethook(W, cancel_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    task_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    for (lua_State* W : states) lua_close(W);
    states.clear();
  }
};

// The message of a Lua error value: a string, or a tc error table (kind, message, file, line).
std::string error_text(lua_State* W, int idx) {
  if (lua_type(W, idx) == LUA_TSTRING) return lua_tostring(W, idx);
  if (lua_type(W, idx) == LUA_TTABLE) {
    std::string out;
    lua_getfield(W, idx, "file");
    lua_getfield(W, idx, "line");
    if (lua_type(W, -2) == LUA_TSTRING) out = std::string(lua_tostring(W, -2)) + ":" + std::to_string(lua_tointeger(W, -1)) + ": ";
    lua_pop(W, 2);
    lua_getfield(W, idx, "kind");
    if (lua_type(W, -1) == LUA_TSTRING) out += std::string(lua_tostring(W, -1)) + ": ";
    lua_pop(W, 1);
    lua_getfield(W, idx, "message");
    out += lua_type(W, -1) == LUA_TSTRING ? lua_tostring(W, -1) : "(error object without a message)";
    lua_pop(W, 1);
    return out;
  }
  return std::string("(error object is a ") + luaL_typename(W, idx) + ")";
}

// pcall(f, args...) in a worker state; false leaves the error's text in *err.
bool protected_call(lua_State* W, int nargs, int nresults, std::string* err) {
  if (lua_pcall(W, nargs, nresults, 0) == LUA_OK) return true;
  *err = error_text(W, -1);
  lua_pop(W, 1);
  return false;
}

void worker_main(Pool* p, int id, int n) {
  lua_State* W = p->states[id];
  lua_pushlightuserdata(W, &p->cancel);
  lua_setfield(W, LUA_REGISTRYINDEX, kCancelKey);
  std::string boot_error;
  bool booted = false;
  try {
    lua_getglobal(W, "require");
    lua_pushstring(W, "tc.utils.data");
    if (protected_call(W, 1, 1, &boot_error)) {
      lua_getfield(W, -1, "_worker_boot");
      push_box(W, p->spec);
      lua_pushinteger(W, id + 1);
      lua_pushinteger(W, n);
      booted = protected_call(W, 3, 1, &boot_error);  // the fetch function stays at the top
    }
  } catch (const std::exception& e) {
    boot_error = e.what();
  }
  int fetch = lua_gettop(W);
  for (;;) {
    Pool::Task task;
    {
      std::unique_lock g(p->mu);
      p->task_cv.wait(g, [&] { return p->stop || p->next_for(id) != p->tasks.end(); });
      if (p->stop) return;
      auto it = p->next_for(id);
      task = std::move(*it);
      p->tasks.erase(it);
    }
    Result r{false, {}, {}};
    if (!booted) {
      r.error = "starting the worker failed: " + boot_error;
    } else {
      try {
        lua_pushvalue(W, fetch);
        push_box(W, task.value);
        if (protected_call(W, 1, 1, &r.error)) {
          r.value = to_box(W, -1, 0);
          r.ok = true;
          lua_pop(W, 1);
        }
      } catch (const std::exception& e) {
        r.ok = false;
        r.error = e.what();
      }
      lua_settop(W, fetch);
    }
    {
      std::lock_guard g(p->mu);
      if (task.tag >= p->min_tag) p->results[task.tag] = std::move(r);
    }
    p->result_cv.notify_all();
  }
}

constexpr const char* kPoolMeta = "tc.DataLoaderWorkers";

Pool* check_pool(lua_State* L) {
  auto** p = static_cast<Pool**>(luaL_testudata(L, 1, kPoolMeta));
  TC_CHECK(p && *p, ValueError, "DataLoader workers: expected an open worker pool");
  return *p;
}

// A new Lua state for a worker (made on the calling thread: opening tc registers the state with
// the memory-pressure hook, which only that thread may touch). The worker's state is then taken
// off that hook's list: the main thread must never collect a state another thread runs.
lua_State* new_worker_state(lua_State* L) {
  lua_State* W = luaL_newstate();
  TC_CHECK(W, OutOfMemoryError, "DataLoader workers: cannot create a Lua state");
  luaL_openlibs(W);
  lua_getglobal(W, "package");
  for (const char* field : {"path", "cpath"}) {
    lua_getglobal(L, "package");
    if (lua_type(L, -1) == LUA_TTABLE && lua_getfield(L, -1, field) == LUA_TSTRING) {
      lua_pushstring(W, lua_tostring(L, -1));
      lua_setfield(W, -2, field);
    }
    lua_settop(L, lua_gettop(L) - (lua_type(L, -1) == LUA_TTABLE ? 1 : 2));
  }
  lua_getfield(W, -1, "preload");
  lua_pushcfunction(W, tc_open_library);
  lua_setfield(W, -2, "tc");
  lua_settop(W, 0);
  lua_getglobal(W, "require");
  lua_pushstring(W, "tc");
  std::string err;
  if (!protected_call(W, 1, 0, &err)) {
    lua_close(W);
    TC_FAIL(ValueError, "DataLoader workers: opening tc in a worker state failed: %s", err.c_str());
  }
  lua_pushnil(W);
  lua_setfield(W, LUA_REGISTRYINDEX, "tc.memory_pressure_sentinel");
  lua_gc(W, LUA_GCCOLLECT);
  return W;
}

// tc._C.data_workers(n, spec) -> pool
int c_data_workers(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_isinteger(L, 1) && lua_tointeger(L, 1) >= 1, ValueError, "data_workers: n must be an integer >= 1");
    int n = (int)lua_tointeger(L, 1);
    auto** slot = static_cast<Pool**>(lua_newuserdatauv(L, sizeof(Pool*), 0));
    *slot = nullptr;
    luaL_setmetatable(L, kPoolMeta);
    auto* p = new Pool;
    *slot = p;
    p->spec = to_box(L, 2, 0);
    for (int k = 0; k < n; k++) p->states.push_back(new_worker_state(L));
    for (int k = 0; k < n; k++) p->threads.emplace_back(worker_main, p, k, n);
    return 1;
  });
}

int pool_submit(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Pool* p = check_pool(L);
    TC_CHECK(lua_isinteger(L, 2), ValueError, "data_workers:submit: tag must be an integer");
    int worker = lua_isinteger(L, 4) ? (int)lua_tointeger(L, 4) - 1 : -1;
    TC_CHECK(worker < (int)p->threads.size(), ValueError, "data_workers:submit: no worker %d", worker + 1);
    Box value = to_box(L, 3, 0);
    {
      std::lock_guard g(p->mu);
      p->tasks.push_back({lua_tointeger(L, 2), worker, std::move(value)});
    }
    p->task_cv.notify_all();  // a task for one worker must wake that one
    return 0;
  });
}

int pool_take(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Pool* p = check_pool(L);
    int64_t tag = lua_tointeger(L, 2);
    double timeout = lua_tonumber(L, 3);  // seconds; 0 or none: wait as long as it takes
    Result r;
    {
      std::unique_lock g(p->mu);
      auto ready = [&] { return p->results.count(tag) > 0; };
      if (timeout > 0) {
        if (!p->result_cv.wait_for(g, std::chrono::duration<double>(timeout), ready)) {
          lua_pushboolean(L, 0);
          lua_pushfstring(L, "timed out after %f s waiting for the batch (DataLoader timeout)", timeout);
          return 2;
        }
      } else {
        p->result_cv.wait(g, ready);
      }
      r = std::move(p->results[tag]);
      p->results.erase(tag);
    }
    lua_pushboolean(L, r.ok);
    if (r.ok)
      push_box(L, r.value);
    else
      lua_pushlstring(L, r.error.data(), r.error.size());
    return 2;
  });
}

int pool_clear(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Pool* p = check_pool(L);
    std::lock_guard g(p->mu);
    p->min_tag = lua_tointeger(L, 2);
    p->tasks.clear();
    p->results.clear();
    return 0;
  });
}

int pool_close(lua_State* L) {
  auto** slot = static_cast<Pool**>(luaL_checkudata(L, 1, kPoolMeta));
  if (*slot) {
    (*slot)->close();
    delete *slot;
    *slot = nullptr;
  }
  return 0;
}

}  // namespace

void open_data_workers(lua_State* L) {
  // tc table at -1
  luaL_newmetatable(L, kPoolMeta);
  lua_newtable(L);
  const luaL_Reg methods[] = {{"submit", pool_submit}, {"take", pool_take}, {"clear", pool_clear},
                              {"close", pool_close},   {nullptr, nullptr}};
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, pool_close);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_getfield(L, -1, "_C");
  lua_pushcfunction(L, c_data_workers);
  lua_setfield(L, -2, "data_workers");
  lua_pop(L, 1);
}

}  // namespace tc::lua
