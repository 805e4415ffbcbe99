// Lua values <-> tc::Value, dtype objects and tc.Size tables.
#include <cmath>

#include "lua_binding.h"

namespace tc::lua {
namespace {

bool has_meta(lua_State* L, int idx, const char* key) {
  if (!lua_getmetatable(L, idx)) return false;
  luaL_getmetatable(L, key);
  bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

[[noreturn]] void bad_value(lua_State* L, int idx, const char* what, const char* why) {
  TC_FAIL(ValueError, "%s: %s (got %s)", what, why, luaL_typename(L, idx));
}

Value table_to_value(lua_State* L, int idx, const char* what) {
  idx = lua_absindex(L, idx);
  if (has_meta(L, idx, kSizeMeta) || has_meta(L, idx, kDTypeMeta)) {
    // Size: IntList (dtype objects are handled by the caller)
  } else if (lua_getmetatable(L, idx)) {
    lua_pop(L, 1);
    bad_value(L, idx, what, "a table with a metatable is not a tensor argument");
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  if (n == 0) {
    lua_pushnil(L);
    if (lua_next(L, idx)) {
      lua_pop(L, 2);
      bad_value(L, idx, what, "expected an array (a table with keys 1..n)");
    }
    return Value(TensorList{});  // an empty list: the binder accepts it for int[] too
  }
  enum { Ints, Floats, Tensors } kind = Ints;
  IntList ints;
  FloatList floats;
  TensorList tensors;
  for (lua_Integer i = 1; i <= n; i++) {
    int t = lua_rawgeti(L, idx, i);
    if (t == LUA_TNUMBER && kind != Tensors) {
      if (lua_isinteger(L, -1)) {
        ints.push_back(lua_tointeger(L, -1));
        floats.push_back((double)lua_tointeger(L, -1));
      } else {
        kind = Floats;
        floats.push_back(lua_tonumber(L, -1));
      }
    } else if (const Tensor* x = to_tensor(L, -1); x && (i == 1 || kind == Tensors)) {
      kind = Tensors;
      tensors.push_back(*x);
    } else {
      const char* tn = to_tensor(L, -1) ? "tensor" : lua_typename(L, t);
      lua_pop(L, 1);
      TC_FAIL(ValueError, "%s: element %lld of the list is a %s; expected all numbers or all tensors", what,
              (long long)i, tn);
    }
    lua_pop(L, 1);
  }
  if (kind == Tensors) return Value(std::move(tensors));
  if (kind == Floats) return Value(std::move(floats));
  return Value(std::move(ints));
}

}  // namespace

bool to_dtype(lua_State* L, int idx, DType* out) {
  if (lua_type(L, idx) == LUA_TSTRING) return dtype_from_name(lua_tostring(L, idx), out);
  if (lua_type(L, idx) != LUA_TTABLE || !has_meta(L, idx, kDTypeMeta)) return false;
  lua_getfield(L, idx, "_id");  // a raw field of the dtype table: no metamethod
  *out = (DType)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return true;
}

void push_dtype(lua_State* L, DType t) {
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.dtypes");  // array indexed by DType + 1
  lua_rawgeti(L, -1, (lua_Integer)t + 1);
  lua_remove(L, -2);
}

void push_size(lua_State* L, const Shape& s) {
  lua_createtable(L, (int)s.size(), 0);
  for (size_t i = 0; i < s.size(); i++) {
    lua_pushinteger(L, s[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  luaL_setmetatable(L, kSizeMeta);
}

bool is_options_table(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE) return false;
  if (lua_getmetatable(L, idx)) {
    lua_pop(L, 1);
    return false;
  }
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    bool str = lua_type(L, -2) == LUA_TSTRING;
    lua_pop(L, 1);
    if (str) {
      lua_pop(L, 1);
      return true;
    }
  }
  return false;
}

Value to_value(lua_State* L, int idx, const char* what) {
  switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL: return Value();
    case LUA_TBOOLEAN: return Value((bool)lua_toboolean(L, idx));
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return Value((int64_t)lua_tointeger(L, idx));
      return Value((double)lua_tonumber(L, idx));
    case LUA_TSTRING: return Value(std::string(lua_tostring(L, idx)));
    case LUA_TUSERDATA:
      if (const Tensor* t = to_tensor(L, idx)) return Value(*t);
      break;
    case LUA_TTABLE: {
      DType dt;
      if (to_dtype(L, idx, &dt)) return Value(dt);
      return table_to_value(L, idx, what);
    }
    default: break;
  }
  bad_value(L, idx, what, "unsupported argument type");
}

void push_value(lua_State* L, const Value& v) {
  if (v.is_none()) {
    lua_pushnil(L);
  } else if (v.is_tensor()) {
    push_tensor(L, v.tensor());
  } else if (v.is_tensor_list()) {
    const TensorList& l = v.tensors();
    lua_createtable(L, (int)l.size(), 0);
    for (size_t i = 0; i < l.size(); i++) {
      push_tensor(L, l[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
  } else if (v.is_bool()) {
    lua_pushboolean(L, v.to_bool());
  } else if (v.is_int()) {
    lua_pushinteger(L, v.to_int());
  } else if (v.is_double()) {
    lua_pushnumber(L, v.to_double());
  } else if (v.is_int_list()) {
    const IntList& l = v.ints();
    lua_createtable(L, (int)l.size(), 0);
    for (size_t i = 0; i < l.size(); i++) {
      lua_pushinteger(L, l[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
  } else if (v.is_float_list()) {
    const FloatList& l = v.floats();
    lua_createtable(L, (int)l.size(), 0);
    for (size_t i = 0; i < l.size(); i++) {
      lua_pushnumber(L, l[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
  } else if (v.is_string()) {
    lua_pushlstring(L, v.str().data(), v.str().size());
  } else if (v.is_dtype()) {
    push_dtype(L, v.dtype());
  } else {
    std::string s = v.device().str();
    lua_pushlstring(L, s.data(), s.size());
  }
}

}  // namespace tc::lua
