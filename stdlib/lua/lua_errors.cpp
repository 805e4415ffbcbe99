// Error tables: tc::Error (and argument errors of the binding) become Lua errors carrying
// {kind=, message=, file=, line=} with metatable tc.<Kind>, positioned at the user's line.
#include <cstring>
#include <exception>
#include <new>

#include "lua_binding.h"

namespace tc::lua {
namespace {

const char* const kKinds[] = {
#define X(k) #k,
    TC_ERROR_KINDS(X)
#undef X
};

std::string meta_key(const char* kind) { return std::string("tc.") + kind; }

// True for chunks that belong to tc itself (embedded Lua modules).
bool is_tc_chunk(const char* source) { return std::strncmp(source, "@[tc]/", 6) == 0; }

int error_tostring(lua_State* L) {
  lua_getfield(L, 1, "message");
  const char* msg = lua_tostring(L, -1);
  lua_getfield(L, 1, "file");
  lua_getfield(L, 1, "line");
  if (lua_isstring(L, -2) && lua_isinteger(L, -1))
    lua_pushfstring(L, "%s:%d: %s", lua_tostring(L, -2), (int)lua_tointeger(L, -1), msg ? msg : "?");
  else
    lua_pushstring(L, msg ? msg : "?");
  return 1;
}

// tc._C.raise(kind, message): for Lua-side code of tc (argument errors of the sugar).
int l_raise(lua_State* L) {
  const char* kind = luaL_checkstring(L, 1);
  const char* msg = luaL_checkstring(L, 2);
  luaL_getmetatable(L, meta_key(kind).c_str());
  bool known = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!known) return luaL_error(L, "tc._C.raise: unknown error kind '%s' (message: %s)", kind, msg);
  push_error(L, kind, msg, 1);
  return lua_error(L);
}

// True when the value at idx is a tc error (its metatable is one of tc.<Kind>).
bool is_tc_error(lua_State* L, int idx) {
  if (!lua_getmetatable(L, idx)) return false;
  lua_getfield(L, -1, "__name");
  const char* name = lua_tostring(L, -1);
  bool yes = false;
  for (const char* kind : kKinds) yes = yes || (name && meta_key(kind) == name);
  lua_pop(L, 2);
  return yes;
}

// debug.traceback([thread,] [message [, level]]) as Lua's, except that a tc error as the message
// is written with its __tostring ("file:line: message") instead of being returned untouched, so
// that `xpcall(f, debug.traceback)` shows tc errors with their traceback. tc.traceback is the
// same function and writes any message that has a __tostring.
int traceback(lua_State* L, bool any) {
  int arg = 0;
  lua_State* L1 = L;
  if (lua_isthread(L, 1)) arg = 1, L1 = lua_tothread(L, 1);
  const bool is_text = lua_tostring(L, arg + 1) != nullptr || lua_isnoneornil(L, arg + 1);
  bool printable = is_text || is_tc_error(L, arg + 1);
  if (!printable && any && luaL_getmetafield(L, arg + 1, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    printable = true;
  }
  if (!printable) {
    lua_pushvalue(L, arg + 1);  // another value: returned untouched, as Lua does
    return 1;
  }
  const int level = int(luaL_optinteger(L, arg + 2, L == L1 ? 1 : 0));  // before pushing
  const char* msg = is_text ? lua_tostring(L, arg + 1) : luaL_tolstring(L, arg + 1, nullptr);
  luaL_traceback(L, L1, msg, level);
  return 1;
}
int l_debug_traceback(lua_State* L) { return traceback(L, false); }
int l_tc_traceback(lua_State* L) { return traceback(L, true); }

}  // namespace

void push_error(lua_State* L, const char* kind, const char* message, int level) {
  lua_Debug ar;
  const char* file = nullptr;
  int line = -1;
  for (int lv = level; lua_getstack(L, lv, &ar); lv++) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline <= 0 || is_tc_chunk(ar.source)) continue;  // C functions and tc's own code
    file = ar.short_src;
    line = ar.currentline;
    break;
  }
  lua_createtable(L, 0, 4);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  if (file) {
    lua_pushstring(L, file);
    lua_setfield(L, -2, "file");
    lua_pushinteger(L, line);
    lua_setfield(L, -2, "line");
  }
  luaL_getmetatable(L, meta_key(kind).c_str());
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    luaL_getmetatable(L, "tc.ValueError");
  }
  lua_setmetatable(L, -2);
}

void raise_error(lua_State* L, const char* kind, const char* message) {
  push_error(L, kind, message, 1);
  lua_error(L);
  __builtin_unreachable();
}

namespace detail {

int run_caught(lua_State* L, int (*thunk)(lua_State*, void*), void* fn) {
  const char* kind = nullptr;
  try {
    return thunk(L, fn);
  } catch (const Error& e) {
    kind = error_kind_name(e.kind());
    lua_pushstring(L, e.what());
  } catch (const std::bad_alloc&) {
    kind = "OutOfMemoryError";
    lua_pushstring(L, "out of memory");
  } catch (const std::exception& e) {
    kind = "ValueError";
    lua_pushstring(L, e.what());
  }
  lua_pushstring(L, kind);
  return -1;
}

void raise_pending(lua_State* L) {
  // stack: ... message kind
  const char* kind = lua_tostring(L, -1);
  const char* msg = lua_tostring(L, -2);
  push_error(L, kind, msg, 1);
  lua_error(L);
  __builtin_unreachable();
}

}  // namespace detail

void open_errors(lua_State* L) {
  // tc table at -1
  for (const char* kind : kKinds) {
    luaL_newmetatable(L, meta_key(kind).c_str());
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, meta_key(kind).c_str());
    lua_setfield(L, -2, "__name");
    lua_setfield(L, -2, kind);  // tc.ShapeError = the metatable
  }
  lua_pushcfunction(L, l_tc_traceback);
  lua_setfield(L, -2, "traceback");
  if (lua_getglobal(L, "debug") == LUA_TTABLE) {
    lua_pushcfunction(L, l_debug_traceback);
    lua_setfield(L, -2, "traceback");
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "_C");
  lua_pushcfunction(L, l_raise);
  lua_setfield(L, -2, "raise");
  lua_pop(L, 1);
}

}  // namespace tc::lua
