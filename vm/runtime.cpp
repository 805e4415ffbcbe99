// The Lua runtime: a lua_State with the standard libraries and `require "tc"`, protected calls
// that turn Lua errors into LuaError (message + traceback), and the C++ embedding API.
#include "tc/vm/runtime.h"

#include <cstring>
#include <new>

#include "lua_binding.h"

extern "C" int tc_open_library(lua_State* L);

namespace tc::vm {
namespace detail {

constexpr const char* kTracebackKey = "tc.vm.traceback";
constexpr const char* kHostFnMeta = "tc.vm.HostFunction";

// Message handler of every protected call: keeps the error object, records the traceback.
int message_handler(lua_State* L) {
  luaL_traceback(L, L, nullptr, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, kTracebackKey);
  return 1;
}

int tostring_helper(lua_State* L) {
  luaL_tolstring(L, 1, nullptr);
  return 1;
}

// The text of an error object: strings as they are, tables through __tostring.
std::string describe(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING) return lua_tostring(L, idx);
  if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushcfunction(L, tostring_helper);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) {
      std::string s = lua_tostring(L, -1);
      lua_pop(L, 1);
      return s;
    }
    lua_pop(L, 1);
  }
  return std::string("(error object is a ") + luaL_typename(L, idx) + " value)";
}

LuaError make_error(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  std::string kind;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_pushstring(L, "kind");
    if (lua_rawget(L, idx) == LUA_TSTRING) kind = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  std::string tb;
  if (lua_getfield(L, LUA_REGISTRYINDEX, kTracebackKey) == LUA_TSTRING) tb = lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kTracebackKey);
  return LuaError(describe(L, idx), kind, tb);
}

struct State : std::enable_shared_from_this<State> {
  lua_State* L;
  explicit State(lua_State* l) : L(l) {}
  ~State() { lua_close(L); }

  Ref ref_top() {  // pops the top value into a Ref
    return Ref(shared_from_this(), luaL_ref(L, LUA_REGISTRYINDEX));
  }

  // Calls the function below `nargs` arguments on top of the stack; returns its results.
  Results pcall(int nargs) {
    int base = lua_gettop(L) - nargs - 1;
    lua_pushcfunction(L, message_handler);
    lua_insert(L, base + 1);
    if (lua_pcall(L, nargs, LUA_MULTRET, base + 1) != LUA_OK) {
      LuaError e = make_error(L, -1);
      lua_settop(L, base);
      throw e;
    }
    int n = lua_gettop(L) - (base + 1);
    Results r;
    r.reserve(n);
    for (int i = 0; i < n; i++) {
      lua_pushvalue(L, base + 2 + i);
      r.push_back(ref_top());
    }
    lua_settop(L, base);
    return r;
  }

  void push_arg(const Arg& a) {
    if (auto* v = std::get_if<Value>(&a.data()))
      lua::push_value(L, *v);
    else
      std::get<std::shared_ptr<const Ref>>(a.data())->push();
  }
};

// Protected helpers (they may run metamethods, so they run under lua_pcall).
int l_gettable(lua_State* L) {
  lua_gettable(L, 1);
  return 1;
}
int l_get_path(lua_State* L) {  // "a.b.c" from the globals
  const char* path = luaL_checkstring(L, 1);
  lua_pushglobaltable(L);
  while (*path) {
    const char* dot = std::strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : std::strlen(path);
    if (lua_isnil(L, -1)) return luaL_error(L, "'%s' is not defined", lua_tostring(L, 1));
    lua_pushlstring(L, path, len);
    lua_gettable(L, -2);
    lua_remove(L, -2);
    path += len + (dot ? 1 : 0);
  }
  return 1;
}
int l_setglobal(lua_State* L) {
  lua_settop(L, 2);
  lua_setglobal(L, luaL_checkstring(L, 1));
  return 0;
}

int host_function_gc(lua_State* L) {
  static_cast<HostFunction*>(lua_touserdata(L, 1))->~HostFunction();
  return 0;
}

int host_function_call(lua_State* L) {
  return lua::guarded(L, [](lua_State* L) {
    auto* fn = static_cast<HostFunction*>(lua_touserdata(L, lua_upvalueindex(1)));
    Values args;
    for (int i = 1; i <= lua_gettop(L); i++) {
      std::string what = "argument " + std::to_string(i);
      args.push_back(lua::to_value(L, i, what.c_str()));
    }
    Values out = (*fn)(args);
    TC_CHECK(lua_checkstack(L, (int)out.size()), ValueError, "host function returned too many results (%zu)", out.size());
    for (const Value& v : out) lua::push_value(L, v);
    return (int)out.size();
  });
}

}  // namespace detail

using detail::State;

// ---- Arg and Ref -------------------------------------------------------------------------------
Arg::Arg(const Ref& r) : v_(std::make_shared<const Ref>(r)) {}

Ref::Ref(const Ref& o) : s_(o.s_) {
  o.push();
  ref_ = luaL_ref(s_->L, LUA_REGISTRYINDEX);
}
Ref& Ref::operator=(const Ref& o) {
  if (this == &o) return *this;
  o.push();
  int r = luaL_ref(o.s_->L, LUA_REGISTRYINDEX);
  luaL_unref(s_->L, LUA_REGISTRYINDEX, ref_);
  s_ = o.s_;
  ref_ = r;
  return *this;
}
Ref::~Ref() { luaL_unref(s_->L, LUA_REGISTRYINDEX, ref_); }

void Ref::push() const { lua_rawgeti(s_->L, LUA_REGISTRYINDEX, ref_); }

Results Ref::call(const std::vector<Arg>& args) const {
  lua_State* L = s_->L;
  if (!lua_checkstack(L, (int)args.size() + 4)) throw LuaError("too many arguments for a Lua call", "", "");
  push();
  for (const Arg& a : args) s_->push_arg(a);
  return s_->pcall((int)args.size());
}

Ref Ref::operator[](const std::string& key) const {
  lua_State* L = s_->L;
  lua_pushcfunction(L, detail::l_gettable);
  push();
  lua_pushlstring(L, key.data(), key.size());
  return s_->pcall(2).at(0);
}
Ref Ref::operator[](int64_t index) const {
  lua_State* L = s_->L;
  lua_pushcfunction(L, detail::l_gettable);
  push();
  lua_pushinteger(L, index);
  return s_->pcall(2).at(0);
}

std::string Ref::type_name() const {
  push();
  std::string s = luaL_typename(s_->L, -1);
  lua_pop(s_->L, 1);
  return s;
}
bool Ref::is_nil() const { return type_name() == "nil"; }
bool Ref::is_function() const { return type_name() == "function"; }
bool Ref::is_tensor() const {
  push();
  bool t = lua::to_tensor(s_->L, -1) != nullptr;
  lua_pop(s_->L, 1);
  return t;
}

Value Ref::value() const {
  push();
  try {
    Value v = lua::to_value(s_->L, -1, "Lua value");
    lua_pop(s_->L, 1);
    return v;
  } catch (...) {
    lua_pop(s_->L, 1);
    throw;
  }
}

Tensor Ref::tensor() const {
  Value v = value();
  TC_CHECK(v.is_tensor(), ValueError, "expected a tensor from Lua, got a %s", type_name().c_str());
  return v.tensor();
}
double Ref::number() const {
  Value v = value();
  TC_CHECK(v.is_int() || v.is_double(), ValueError, "expected a number from Lua, got a %s", type_name().c_str());
  return v.to_double();
}
int64_t Ref::integer() const {
  push();
  int ok = 0;
  lua_Integer i = lua_tointegerx(s_->L, -1, &ok);
  bool num = lua_type(s_->L, -1) == LUA_TNUMBER;
  lua_pop(s_->L, 1);
  TC_CHECK(ok && num, ValueError, "expected an integer from Lua, got a %s", type_name().c_str());
  return i;
}
bool Ref::boolean() const {
  push();
  bool b = lua_toboolean(s_->L, -1);
  lua_pop(s_->L, 1);
  return b;
}
std::string Ref::string() const {
  push();
  bool ok = lua_type(s_->L, -1) == LUA_TSTRING;
  std::string s = ok ? lua_tostring(s_->L, -1) : "";
  lua_pop(s_->L, 1);
  TC_CHECK(ok, ValueError, "expected a string from Lua, got a %s", type_name().c_str());
  return s;
}

// ---- Runtime -----------------------------------------------------------------------------------
Runtime::Runtime(const char* host) {
  lua_State* L = luaL_newstate();
  if (!L) throw std::bad_alloc();
  s_ = std::make_shared<State>(L);
  luaL_openlibs(L);
  lua_pushstring(L, host);
  lua_setfield(L, LUA_REGISTRYINDEX, lua::kHostKey);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, tc_open_library);
  lua_setfield(L, -2, "tc");
  lua_pop(L, 2);
  luaL_newmetatable(L, detail::kHostFnMeta);
  lua_pushcfunction(L, detail::host_function_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  require("tc");  // registers tc's other embedded modules (tc.nn ...) in package.preload
}

Runtime::~Runtime() = default;

lua_State* Runtime::state() const { return s_->L; }

Results Runtime::run_file(const std::string& path, const std::vector<Arg>& args) {
  lua_State* L = s_->L;
  if (luaL_loadfile(L, path.c_str()) != LUA_OK) {
    std::string msg = lua_tostring(L, -1);
    lua_pop(L, 1);
    throw LuaError(msg, "", "");
  }
  if (!lua_checkstack(L, (int)args.size() + 4)) throw LuaError("too many arguments for a Lua call", "", "");
  for (const Arg& a : args) s_->push_arg(a);
  return s_->pcall((int)args.size());
}

Results Runtime::run_string(const std::string& code, const std::string& chunkname, const std::vector<Arg>& args) {
  lua_State* L = s_->L;
  if (!lua_checkstack(L, (int)args.size() + 4)) throw LuaError("too many arguments for a Lua call", "", "");
  if (luaL_loadbuffer(L, code.data(), code.size(), chunkname.c_str()) != LUA_OK) {
    std::string msg = lua_tostring(L, -1);
    lua_pop(L, 1);
    throw LuaError(msg, "", "");
  }
  for (const Arg& a : args) s_->push_arg(a);
  return s_->pcall((int)args.size());
}

Ref Runtime::global(const std::string& name) const {
  lua_pushcfunction(s_->L, detail::l_get_path);
  lua_pushlstring(s_->L, name.data(), name.size());
  return s_->pcall(1).at(0);
}

void Runtime::set_global(const std::string& name, const Arg& value) {
  lua_pushcfunction(s_->L, detail::l_setglobal);
  lua_pushlstring(s_->L, name.data(), name.size());
  s_->push_arg(value);
  s_->pcall(2);
}

Ref Runtime::require(const std::string& module) { return global("require")(module).at(0); }

void Runtime::register_function(const std::string& name, HostFunction fn) {
  lua_State* L = s_->L;
  void* mem = lua_newuserdatauv(L, sizeof(HostFunction), 0);
  new (mem) HostFunction(std::move(fn));
  luaL_setmetatable(L, detail::kHostFnMeta);
  lua_pushcclosure(L, detail::host_function_call, 1);
  Ref f = s_->ref_top();
  set_global(name, f);
}

// ---- host memory -------------------------------------------------------------------------------
Tensor from_host(const void* data, const Shape& sizes, DType dtype) {
  Tensor t = Tensor::empty(sizes, dtype);
  std::memcpy(t.data_ptr(), data, (size_t)t.numel() * t.itemsize());
  return t;
}

Tensor borrow_host(void* data, const Shape& sizes, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  size_t nbytes = (size_t)shape_numel(sizes) * itemsize(dtype);
  // A no-op deleter: the caller owns the memory (Storage treats a null deleter as owned memory).
  impl->storage = Storage::wrap(data, nbytes, Device{}, [](void*, void*) {}, nullptr);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void to_host(const Tensor& t, void* dst, size_t nbytes) {
  size_t need = (size_t)t.numel() * t.itemsize();
  TC_CHECK(nbytes == need, ValueError, "to_host: the tensor has %zu bytes (%s) but the buffer has %zu", need,
           t.meta_string().c_str(), nbytes);
  Tensor c = Tensor::empty(t.sizes(), t.dtype());
  c.copy_from(t);
  std::memcpy(dst, c.data_ptr(), need);
}

}  // namespace tc::vm
