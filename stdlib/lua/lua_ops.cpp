// One Lua function per ops.def row (a C closure with the op id as upvalue): Lua arguments ->
// tc::Value (a trailing table with string keys gives the keyword arguments), bind() + call(),
// results back to Lua. Rows whose first argument is `Tensor self` are also tensor methods.
#include <cstdio>

#include "lua_binding.h"

namespace tc::lua {
namespace {

int op_function(lua_State* L) {
  int n = guarded(L, [](lua_State* L) {
    Op o = (Op)lua_tointeger(L, lua_upvalueindex(1));
    const OpSchema& s = schema(o);
    char what[96] = "";
    int top = lua_gettop(L);
    std::vector<std::pair<std::string, Value>> kw;
    if (top > 0 && is_options_table(L, top)) {
      lua_pushnil(L);
      while (lua_next(L, top)) {
        TC_CHECK(lua_type(L, -2) == LUA_TSTRING, ValueError,
                 "%s(): the options table must have only string keys (found a %s key)", s.name,
                 luaL_typename(L, -2));
        const char* key = lua_tostring(L, -2);
        std::snprintf(what, sizeof what, "%s(): option '%s'", s.name, key);
        kw.emplace_back(key, to_value(L, -1, what));
        lua_pop(L, 1);
      }
      top--;
    }
    Stack pos;
    pos.reserve(top);
    for (int i = 1; i <= top; i++) {
      if (const Tensor* t = to_tensor(L, i)) {
        pos.emplace_back(*t);
        continue;
      }
      int t = lua_type(L, i);
      if (t != LUA_TNUMBER && t != LUA_TBOOLEAN && t != LUA_TSTRING && t != LUA_TNIL)
        std::snprintf(what, sizeof what, "%s(): argument %d", s.name, i);  // only these can fail
      pos.push_back(to_value(L, i, what));
    }
    Stack out = call(o, bind(o, std::move(pos), std::move(kw)));
    for (const Value& v : out) {
      // A result that is one of the arguments (in-place ops, no-op conversions) is given back as
      // the same Lua object.
      int same = 0;
      for (int i = 1; v.is_tensor() && i <= top && !same; i++) {
        const Tensor* a = to_tensor(L, i);
        if (a && a->impl() == v.tensor().impl()) same = i;
      }
      if (same)
        lua_pushvalue(L, same);
      else
        push_value(L, v);
    }
    return (int)out.size();
  });
  gc_pressure(L);
  return n;
}

}  // namespace

std::optional<Op> op_of(lua_State* L, int idx) {
  if (lua_tocfunction(L, idx) != op_function) return std::nullopt;
  lua_getupvalue(L, idx, 1);
  const lua_Integer o = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return Op(o);
}

void open_ops(lua_State* L) {
  // tc table at -1; methods are tc.Tensor
  lua_getfield(L, -1, "Tensor");
  for (int i = 0; i < kNumOps; i++) {
    const OpSchema& s = schema((Op)i);
    lua_pushinteger(L, i);
    lua_pushcclosure(L, op_function, 1);
    if (!s.args.empty() && s.args[0].name == "self" && s.args[0].type == ArgType::Tensor) {
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, s.name);  // method
    }
    lua_setfield(L, -3, s.name);  // tc.<name>
  }
  lua_pop(L, 1);
}

}  // namespace tc::lua
