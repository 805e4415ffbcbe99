// The Lua side of autograd: x:backward(grad, opts), tc.autograd.grad / tc.autograd.backward,
// x:retain_grad(), x:register_hook(fn), and the x.grad_fn / x.is_leaf / x.retains_grad properties.
#include "lua_binding.h"
#include "tc/autograd.h"

namespace tc::lua {
namespace {

// The Lua state running the current backward: hooks are called on it.
thread_local lua_State* t_backward_L = nullptr;

struct BackwardScope {
  lua_State* prev;
  explicit BackwardScope(lua_State* L) : prev(t_backward_L) { t_backward_L = L; }
  ~BackwardScope() { t_backward_L = prev; }
};

// A Lua function kept in the registry for as long as the hook lives.
struct LuaRef {
  lua_State* main;
  int ref;
  ~LuaRef() { luaL_unref(main, LUA_REGISTRYINDEX, ref); }
};

Tensor call_hook(const std::shared_ptr<LuaRef>& fn, const Tensor& g) {
  lua_State* L = t_backward_L ? t_backward_L : fn->main;
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn->ref);
  push_tensor(L, g);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    std::string msg = luaL_tolstring(L, -1, nullptr);
    lua_pop(L, 2);
    TC_FAIL(ValueError, "error in a tensor hook: %s", msg.c_str());
  }
  Tensor r;
  if (const Tensor* t = to_tensor(L, -1)) {
    r = *t;
  } else if (!lua_isnil(L, -1)) {
    const char* tn = luaL_typename(L, -1);
    lua_pop(L, 1);
    TC_FAIL(ValueError, "a tensor hook must return nil or a tensor, got %s", tn);
  }
  lua_pop(L, 1);
  if (r.defined())
    TC_CHECK(r.sizes() == g.sizes(), ShapeError, "a tensor hook returned a gradient of shape %s for a gradient of shape %s",
             shape_string(r.sizes()).c_str(), shape_string(g.sizes()).c_str());
  return r;
}

// A tensor or a list of tensors at idx (nil: an empty list).
TensorList tensors_at(lua_State* L, int idx, const char* what) {
  if (lua_isnoneornil(L, idx)) return {};
  if (const Tensor* t = to_tensor(L, idx)) return {*t};
  TC_CHECK(lua_type(L, idx) == LUA_TTABLE, ValueError, "%s must be a tensor or a list of tensors, got %s", what,
           luaL_typename(L, idx));
  TensorList out;
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    const Tensor* t = to_tensor(L, -1);
    bool nil = lua_isnil(L, -1);
    lua_pop(L, 1);
    TC_CHECK(t || nil, ValueError, "%s[%lld] must be a tensor", what, (long long)i);
    out.push_back(t ? *t : Tensor());
  }
  return out;
}

// {retain_graph=, create_graph=, allow_unused=} at idx; `grad_outputs` (or `inputs`) read by the caller.
autograd::Options options_at(lua_State* L, int idx, const char* fn) {
  autograd::Options o;
  if (lua_isnoneornil(L, idx)) return o;
  TC_CHECK(lua_type(L, idx) == LUA_TTABLE, ValueError, "%s: options must be a table, got %s", fn, luaL_typename(L, idx));
  lua_pushnil(L);
  bool retain_given = false;
  while (lua_next(L, idx)) {
    TC_CHECK(lua_type(L, -2) == LUA_TSTRING, ValueError, "%s: option names are strings", fn);
    std::string k = lua_tostring(L, -2);
    bool v = lua_toboolean(L, -1);
    if (k == "retain_graph") {
      o.retain_graph = v;
      retain_given = true;
    } else if (k == "create_graph") {
      o.create_graph = v;
    } else if (k == "allow_unused") {
      o.allow_unused = v;
    } else if (k != "grad_outputs" && k != "inputs" && k != "gradient") {
      lua_pop(L, 2);
      TC_FAIL(ValueError, "%s got an unexpected option '%s' (options: retain_graph, create_graph, %s)", fn, k.c_str(),
              std::string(fn).find("grad(") != std::string::npos ? "allow_unused, grad_outputs" : "inputs");
    }
    lua_pop(L, 1);
  }
  if (!retain_given) o.retain_graph = o.create_graph;
  return o;
}

TensorList field_tensors(lua_State* L, int idx, const char* key, const char* what) {
  if (lua_type(L, idx) != LUA_TTABLE) return {};
  lua_getfield(L, idx, key);
  int top = lua_gettop(L);
  TensorList r;
  try {
    r = tensors_at(L, top, what);
  } catch (...) {
    lua_pop(L, 1);
    throw;
  }
  lua_pop(L, 1);
  return r;
}

// x:backward([grad], [{retain_graph=, create_graph=, inputs=}])
int m_backward(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& x = check_tensor(L, 1, "backward(): self");
    int opts = 3;
    TensorList grads;
    if (to_tensor(L, 2)) {
      grads = {*to_tensor(L, 2)};
    } else if (lua_type(L, 2) == LUA_TTABLE && lua_isnoneornil(L, 3)) {
      opts = 2;  // x:backward{retain_graph=true}
    } else {
      TC_CHECK(lua_isnoneornil(L, 2), ValueError, "backward(): the gradient must be a tensor, got %s", luaL_typename(L, 2));
    }
    autograd::Options o = options_at(L, opts, "backward()");
    TensorList inputs = field_tensors(L, opts, "inputs", "backward(): inputs");
    BackwardScope scope(L);
    autograd::backward({x}, grads, inputs, o);
    return 0;
  });
}

// tc.autograd.backward(tensors, [grad_tensors], [opts])
int l_backward(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TensorList outs = tensors_at(L, 1, "tc.autograd.backward(): tensors");
    int opts = 3;
    TensorList grads;
    if (lua_type(L, 2) == LUA_TTABLE && !to_tensor(L, 2) && lua_rawlen(L, 2) == 0 && lua_isnoneornil(L, 3)) {
      opts = 2;
    } else {
      grads = tensors_at(L, 2, "tc.autograd.backward(): grad_tensors");
    }
    autograd::Options o = options_at(L, opts, "tc.autograd.backward()");
    TensorList inputs = field_tensors(L, opts, "inputs", "tc.autograd.backward(): inputs");
    BackwardScope scope(L);
    autograd::backward(outs, grads, inputs, o);
    return 0;
  });
}

// tc.autograd.grad(outputs, inputs, [{grad_outputs=, retain_graph=, create_graph=, allow_unused=}])
// -> a list of gradients when inputs is a list, else one gradient (nil for unused inputs).
int l_grad(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TensorList outs = tensors_at(L, 1, "tc.autograd.grad(): outputs");
    TensorList ins = tensors_at(L, 2, "tc.autograd.grad(): inputs");
    bool single = to_tensor(L, 2) != nullptr;
    autograd::Options o = options_at(L, 3, "tc.autograd.grad()");
    TensorList gouts = field_tensors(L, 3, "grad_outputs", "tc.autograd.grad(): grad_outputs");
    TensorList r;
    {
      BackwardScope scope(L);
      r = autograd::grad(outs, ins, gouts, o);
    }
    if (single) {
      if (r[0].defined())
        push_tensor(L, r[0]);
      else
        lua_pushnil(L);
      return 1;
    }
    lua_createtable(L, (int)r.size(), 0);
    for (size_t i = 0; i < r.size(); i++) {
      if (!r[i].defined()) continue;
      push_tensor(L, r[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
  });
}

int m_retain_grad(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    autograd::retain_grad(check_tensor(L, 1, "retain_grad(): self"));
    lua_settop(L, 1);
    return 1;
  });
}

int handle_remove(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    lua_getfield(L, 1, "_tensor");
    lua_getfield(L, 1, "_id");
    const Tensor* t = to_tensor(L, -2);
    if (t) autograd::remove_hook(*t, (int)lua_tointeger(L, -1));
    return 0;
  });
}

// The Lua function at `idx` kept in the registry (ValueError naming `what` if not callable).
std::shared_ptr<LuaRef> function_ref(lua_State* L, int idx, const char* what) {
  TC_CHECK(lua_type(L, idx) == LUA_TFUNCTION || (lua_type(L, idx) == LUA_TTABLE && luaL_getmetafield(L, idx, "__call") != LUA_TNIL),
           ValueError, "%s: expected a function, got %s", what, luaL_typename(L, idx));
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State* main = lua_tothread(L, -1);
  lua_pop(L, 1);
  lua_pushvalue(L, idx);
  return std::shared_ptr<LuaRef>(new LuaRef{main, luaL_ref(L, LUA_REGISTRYINDEX)});
}

// Calls fn(args pushed by push_args) on the running backward's thread; a Lua error becomes a
// ValueError naming `what`.
template <class PushArgs>
void call_ref(const std::shared_ptr<LuaRef>& fn, const char* what, PushArgs push_args) {
  lua_State* L = t_backward_L ? t_backward_L : fn->main;
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn->ref);
  int n = push_args(L);
  if (lua_pcall(L, n, 0, 0) != LUA_OK) {
    std::string msg = luaL_tolstring(L, -1, nullptr);
    lua_pop(L, 2);
    TC_FAIL(ValueError, "error in %s: %s", what, msg.c_str());
  }
}

int push_hook_handle(lua_State* L, int tensor_idx, int id) {
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, tensor_idx);
  lua_setfield(L, -2, "_tensor");
  lua_pushinteger(L, id);
  lua_setfield(L, -2, "_id");
  lua_pushcfunction(L, handle_remove);
  lua_setfield(L, -2, "remove");
  return 1;
}

// x:register_post_accumulate_grad_hook(fn) -> handle: fn(x) after backward accumulated x.grad.
int m_register_post_accumulate_grad_hook(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "register_post_accumulate_grad_hook(): self");
    std::shared_ptr<LuaRef> fn = function_ref(L, 2, "register_post_accumulate_grad_hook()");
    int id = autograd::register_post_accumulate_grad_hook(t, [fn](const Tensor& leaf) {
      call_ref(fn, "a post-accumulate-grad hook", [&leaf](lua_State* L) {
        push_tensor(L, leaf);
        return 1;
      });
    });
    return push_hook_handle(L, 1, id);
  });
}

// tc.autograd.queue_callback(fn): from a hook, fn() runs once when the running backward ends.
int l_queue_callback(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    std::shared_ptr<LuaRef> fn = function_ref(L, 1, "tc.autograd.queue_callback()");
    autograd::queue_callback([fn] { call_ref(fn, "a backward callback", [](lua_State*) { return 0; }); });
    return 0;
  });
}

// x:register_hook(fn) -> handle (handle:remove())
int m_register_hook(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "register_hook(): self");
    std::shared_ptr<LuaRef> fn = function_ref(L, 2, "register_hook()");
    int id = autograd::register_hook(t, [fn](const Tensor& g) { return call_hook(fn, g); });
    return push_hook_handle(L, 1, id);
  });
}

int grad_fn_name(lua_State* L) {
  lua_getfield(L, 1, "_name");
  return 1;
}

}  // namespace

// x.grad_fn: nil for a leaf, else {name = "MulBackward0", name() too} (a new table each time).
void push_grad_fn(lua_State* L, const Tensor& t) {
  std::string name = autograd::grad_fn_name(t);
  if (name.empty()) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, 0, 2);
  lua_pushlstring(L, name.data(), name.size());
  lua_setfield(L, -2, "_name");
  lua_pushcfunction(L, grad_fn_name);
  lua_setfield(L, -2, "name");
  if (luaL_newmetatable(L, "tc.GradFn")) {
    lua_pushcfunction(L, [](lua_State* L) {
      lua_getfield(L, 1, "_name");
      lua_pushfstring(L, "<%s>", lua_tostring(L, -1));
      return 1;
    });
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
}

void open_autograd(lua_State* L) {
  // tc table at -1
  lua_getfield(L, -1, "Tensor");
  const luaL_Reg methods[] = {{"backward", m_backward},
                              {"retain_grad", m_retain_grad},
                              {"register_hook", m_register_hook},
                              {"register_post_accumulate_grad_hook", m_register_post_accumulate_grad_hook},
                              {nullptr, nullptr}};
  luaL_setfuncs(L, methods, 0);
  lua_pop(L, 1);
  lua_newtable(L);
  const luaL_Reg fns[] = {
      {"grad", l_grad}, {"backward", l_backward}, {"queue_callback", l_queue_callback}, {nullptr, nullptr}};
  luaL_setfuncs(L, fns, 0);
  lua_setfield(L, -2, "autograd");
}

}  // namespace tc::lua
