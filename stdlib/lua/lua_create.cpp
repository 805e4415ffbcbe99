// Tensors from Lua data and back: tc.tensor(nested tables, opts), x:tolist(), x:item().
#include <climits>
#include <cmath>

#include "lua_binding.h"

namespace tc::lua {
namespace {

struct Collected {
  Shape shape;
  std::vector<double> real;
  std::vector<int64_t> integer;
  std::vector<char> is_int;
  bool any_float = false, any_number = false, any_bool = false;
};

bool is_plain_table(lua_State* L, int idx) { return lua_type(L, idx) == LUA_TTABLE && !to_tensor(L, idx); }

void leaf(lua_State* L, int idx, Collected& c) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    c.any_number = true;
    if (lua_isinteger(L, idx)) {
      lua_Integer v = lua_tointeger(L, idx);
      c.integer.push_back(v);
      c.real.push_back((double)v);
      c.is_int.push_back(1);
    } else {
      c.any_float = true;
      c.real.push_back(lua_tonumber(L, idx));
      c.integer.push_back(0);
      c.is_int.push_back(0);
    }
  } else if (lua_type(L, idx) == LUA_TBOOLEAN) {
    c.any_bool = true;
    c.real.push_back(lua_toboolean(L, idx));
    c.integer.push_back(lua_toboolean(L, idx));
    c.is_int.push_back(1);
  } else if (const Tensor* t = to_tensor(L, idx)) {
    TC_CHECK(t->numel() == 1, ValueError, "tc.tensor(): only one-element tensors can be elements, got a tensor of shape %s",
             shape_string(t->sizes()).c_str());
    bool fl = is_floating(t->dtype());
    (fl ? c.any_float : t->dtype() == DType::Bool ? c.any_bool : c.any_number) = true;
    c.real.push_back(t->item_double());
    c.integer.push_back(fl ? 0 : t->item_int());
    c.is_int.push_back(!fl);
  } else if (lua_type(L, idx) == LUA_TTABLE) {
    TC_FAIL(ShapeError, "tc.tensor(): ragged nested tables: found a table where a number was expected at dim %zu",
            c.shape.size() + 1);
  } else {
    TC_FAIL(ValueError, "tc.tensor(): elements must be numbers, booleans or one-element tensors, got %s",
            luaL_typename(L, idx));
  }
}

void collect(lua_State* L, int idx, size_t depth, Collected& c) {
  if (depth == c.shape.size()) return leaf(L, idx, c);
  TC_CHECK(is_plain_table(L, idx), ShapeError, "tc.tensor(): ragged nested tables: expected a table of length %lld at dim %zu, got %s",
           (long long)c.shape[depth], depth + 1, luaL_typename(L, idx));
  int64_t n = (int64_t)lua_rawlen(L, idx);
  TC_CHECK(n == c.shape[depth], ShapeError, "tc.tensor(): expected sequence of length %lld at dim %zu (got %lld)",
           (long long)c.shape[depth], depth + 1, (long long)n);
  TC_CHECK(lua_checkstack(L, 4), ValueError, "tc.tensor(): nesting too deep");
  for (int64_t i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    collect(L, lua_gettop(L), depth + 1, c);
    lua_pop(L, 1);
  }
}

Tensor to_cpu(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.sizes(), t.dtype());
  h.copy_from(t);
  return h;
}

void push_element(lua_State* L, const Tensor& t, int64_t off) {
  const char* base = static_cast<const char*>(t.storage()->data());
  visit_dtype(t.dtype(), [&]<typename T>() {
    T v = reinterpret_cast<const T*>(base)[off];
    if constexpr (std::is_same_v<T, bool>)
      lua_pushboolean(L, v);
    else if constexpr (std::is_integral_v<T>)
      lua_pushinteger(L, (lua_Integer)v);
    else
      lua_pushnumber(L, (double)static_cast<opmath_t<T>>(v));
  });
}

void push_list(lua_State* L, const Tensor& t, int64_t d, int64_t off) {
  if (d == t.dim()) return push_element(L, t, off);
  TC_CHECK(lua_checkstack(L, 4), ValueError, "tolist(): too many dimensions");
  int64_t n = t.sizes()[d];
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    push_list(L, t, d + 1, off + i * t.strides()[d]);
    lua_rawseti(L, -2, i + 1);
  }
}

// tc.tensor(data, {dtype=, device=, requires_grad=})
int l_tensor(lua_State* L) {
  int n = guarded(L, [](lua_State* L) {
    DType dtype = default_dtype();
    bool have_dtype = false, requires_grad = false;
    Device device = default_device();
    if (lua_gettop(L) >= 2 && !lua_isnil(L, 2)) {
      TC_CHECK(is_options_table(L, 2), ValueError, "tc.tensor(data, options): options must be a table with string keys, got %s",
               luaL_typename(L, 2));
      lua_pushnil(L);
      while (lua_next(L, 2)) {
        std::string_view k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (k == "dtype") {
          TC_CHECK(to_dtype(L, -1, &dtype), DTypeError, "tc.tensor(): option 'dtype' must be a dtype such as tc.float32");
          have_dtype = true;
        } else if (k == "device") {
          TC_CHECK(lua_type(L, -1) == LUA_TSTRING, ValueError, "tc.tensor(): option 'device' must be a string such as \"cpu\"");
          device = Device::parse(lua_tostring(L, -1));
        } else if (k == "requires_grad") {
          requires_grad = lua_toboolean(L, -1);
        } else {
          TC_FAIL(ValueError, "tc.tensor() got an unexpected option '%s' (options: dtype, device, requires_grad)",
                  lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : luaL_typename(L, -2));
        }
        lua_pop(L, 1);
      }
    }
    if (const Tensor* x = to_tensor(L, 1)) {  // a copy, detached
      Tensor t = (have_dtype ? x->to(dtype) : *x).clone();
      if (t.device() != device) t = call1(Op::to_device, {t, device});
      t.set_requires_grad(requires_grad);
      push_tensor(L, t);
      return 1;
    }
    Collected c;
    if (is_plain_table(L, 1)) {  // shape from the first elements
      lua_pushvalue(L, 1);
      while (is_plain_table(L, -1)) {
        int64_t len = (int64_t)lua_rawlen(L, -1);
        c.shape.push_back(len);
        if (len == 0) break;
        lua_rawgeti(L, -1, 1);
      }
      lua_settop(L, 2);
    }
    TC_CHECK(lua_gettop(L) >= 1 && !lua_isnil(L, 1), ValueError, "tc.tensor(data): data must be a number, boolean, table or tensor");
    collect(L, 1, 0, c);
    DType dt = have_dtype ? dtype : c.any_float ? default_dtype() : (c.any_bool && !c.any_number) ? DType::Bool
             : c.real.empty() ? default_dtype() : DType::Int64;
    Tensor t = Tensor::empty(c.shape, dt);
    visit_dtype(dt, [&]<typename T>() {
      T* p = t.data<T>();
      for (size_t i = 0; i < c.real.size(); i++) {
        if constexpr (std::is_same_v<T, bool>)
          p[i] = c.real[i] != 0;
        else if constexpr (std::is_integral_v<T>)
          p[i] = c.is_int[i] ? (T)c.integer[i] : (T)(int64_t)std::trunc(c.real[i]);
        else
          p[i] = (T)(opmath_t<T>)(c.is_int[i] ? (double)c.integer[i] : c.real[i]);
      }
    });
    if (!device.is_cpu()) t = call1(Op::to_device, {t, device});
    if (requires_grad) {
      TC_CHECK(is_floating(dt), DTypeError, "only tensors of floating point dtype can require gradients, got %s", dtype_name(dt));
      t.set_requires_grad(true);
    }
    push_tensor(L, t);
    return 1;
  });
  gc_pressure(L);
  return n;
}

int m_tolist(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor t = to_cpu(check_tensor(L, 1, "self"));
    TC_CHECK(!t.is_fake(), ValueError, "tolist() of a tensor without data");
    for (int64_t d = 0; d < t.dim(); d++)  // lua_createtable takes an int: 2^62 wrapped
      TC_CHECK(t.sizes()[d] <= INT_MAX, OutOfMemoryError,
               "tolist(): dimension %lld has %lld elements, more than a Lua table can hold (%d)", (long long)d + 1,
               (long long)t.sizes()[d], INT_MAX);
    push_list(L, t, 0, t.offset());
    return 1;
  });
}

int m_item(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor t = to_cpu(check_tensor(L, 1, "self"));
    TC_CHECK(!t.is_fake(), ValueError, "item() of a tensor without data");
    TC_CHECK(t.numel() == 1, ValueError, "a Tensor with %lld elements cannot be converted to a number",
             (long long)t.numel());
    push_element(L, t, t.offset());
    return 1;
  });
}

}  // namespace

void open_from_file(lua_State* L);  // lua_from_file.cpp: tc._C.map_file (tc.from_file)
void open_data_workers(lua_State* L);  // lua_data_workers.cpp: tc._C.data_workers (DataLoader)

void open_create(lua_State* L) {
  // tc table at -1
  open_from_file(L);
  open_data_workers(L);
  lua_pushcfunction(L, l_tensor);
  lua_setfield(L, -2, "tensor");
  lua_getfield(L, -1, "Tensor");
  lua_pushcfunction(L, m_tolist);
  lua_setfield(L, -2, "tolist");
  lua_pushcfunction(L, m_item);
  lua_setfield(L, -2, "item");
  lua_pop(L, 1);
}

}  // namespace tc::lua
