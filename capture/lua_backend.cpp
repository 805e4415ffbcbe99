// A Lua function as backend: it receives `gm` (gm:print_tabular(), gm.nodes, gm.code,
// gm:forward(...) running the graph op by op) and the example inputs, and returns the callable
// that runs the graph from then on.
#include <cstring>
#include <memory>

#include "capture_state.h"
#include "lua_binding.h"

namespace tc::capture {
namespace {

constexpr const char* kGraphModuleMeta = "tc.GraphModule";

struct GraphBox {
  std::shared_ptr<Graph> g;
  std::shared_ptr<CompiledGraph> run;  // eager, for gm:forward
};

GraphBox* check_gm(lua_State* L) {
  return static_cast<GraphBox*>(luaL_checkudata(L, 1, kGraphModuleMeta));
}

int gm_print_tabular(lua_State* L) {
  GraphBox* b = check_gm(L);
  std::string s = b->g->print_tabular();
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
  return 0;
}

// gm.forward is bound to its gm: a backend may return it as the callable (`return gm.forward`,
// torch's idiom), and gm:forward(...) works as well (the gm as first argument is skipped).
int gm_forward(lua_State* L) {
  return lua::guarded(L, [](lua_State* L) {
    auto* b = static_cast<GraphBox*>(lua_touserdata(L, lua_upvalueindex(1)));
    const int first = lua_rawequal(L, 1, lua_upvalueindex(1)) ? 2 : 1;
    const int n = lua_gettop(L) - first + 1;
    TC_CHECK(n == int(b->g->inputs.size()), ValueError, "gm.forward(): expected %d tensors, got %d",
             int(b->g->inputs.size()), n);
    std::vector<Tensor> in;
    for (int i = first; i <= lua_gettop(L); i++) in.push_back(lua::check_tensor(L, i, "gm.forward() argument"));
    RunningState running(L);
    std::vector<Tensor> out = (*b->run)(borrow(in));
    for (const Tensor& t : out) lua::push_tensor(L, t);
    return int(out.size());
  });
}

int gm_tostring(lua_State* L) {
  GraphBox* b = check_gm(L);
  std::string s = b->g->print_code();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int gm_gc(lua_State* L) {
  static_cast<GraphBox*>(lua_touserdata(L, 1))->~GraphBox();
  return 0;
}

int gm_index(lua_State* L) {
  GraphBox* b = check_gm(L);
  const char* k = luaL_checkstring(L, 2);
  if (std::strcmp(k, "print_tabular") == 0) return lua_pushcfunction(L, gm_print_tabular), 1;
  if (std::strcmp(k, "forward") == 0) {
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, gm_forward, 1);
    return 1;
  }
  if (std::strcmp(k, "code") == 0) return gm_tostring(L);
  if (std::strcmp(k, "nodes") == 0) {
    const Graph& g = *b->g;
    lua_createtable(L, int(g.nodes.size()) + 1, 0);
    int n = 0;
    for (const Node& node : g.nodes) {
      lua_createtable(L, 0, 4);
      lua_pushstring(L, node.kind == NodeKind::Input ? "placeholder" : "call_function");
      lua_setfield(L, -2, "op");
      lua_pushstring(L, node.name.c_str());
      lua_setfield(L, -2, "name");
      lua_pushstring(L, node.kind == NodeKind::Input ? node.source.c_str() : node.target());
      lua_setfield(L, -2, "target");
      lua_createtable(L, int(node.args.size()), 0);
      int a = 0;
      for (const NodeArg& arg : node.args) {
        if (arg.kind == NodeArg::Kind::Const) continue;
        for (Ref r : arg.refs) {
          lua_pushstring(L, g.ref_name(r).c_str());
          lua_rawseti(L, -2, ++a);
        }
      }
      lua_setfield(L, -2, "args");
      lua_rawseti(L, -2, ++n);
    }
    lua_createtable(L, 0, 4);
    lua_pushstring(L, "output");
    lua_setfield(L, -2, "op");
    lua_pushstring(L, "output");
    lua_setfield(L, -2, "name");
    lua_pushstring(L, "output");
    lua_setfield(L, -2, "target");
    lua_createtable(L, int(g.outputs.size()), 0);
    for (size_t i = 0; i < g.outputs.size(); i++) {
      lua_pushstring(L, g.ref_name(g.outputs[i]).c_str());
      lua_rawseti(L, -2, lua_Integer(i) + 1);
    }
    lua_setfield(L, -2, "args");
    lua_rawseti(L, -2, ++n);
    return 1;
  }
  return 0;
}

void push_gm(lua_State* L, const Graph& g) {
  void* mem = lua_newuserdatauv(L, sizeof(GraphBox), 0);
  auto* b = new (mem) GraphBox{std::make_shared<Graph>(g), nullptr};
  if (luaL_newmetatable(L, kGraphModuleMeta)) {
    const luaL_Reg fns[] = {
        {"__index", gm_index}, {"__tostring", gm_tostring}, {"__gc", gm_gc}, {nullptr, nullptr}};
    luaL_setfuncs(L, fns, 0);
  }
  lua_setmetatable(L, -2);
  b->run = std::make_shared<CompiledGraph>(state().compiler.compile(*b->g, "eager", {}).run);
}

// Pushes the graph inputs as the backend sees them: unspecialized numbers (at positions
// `numbers`) as their 0-dim tensors.
void push_inputs(lua_State* L, const std::vector<int>& slots, const std::vector<int>& numbers) {
  luaL_checkstack(L, int(slots.size()) + 8, "graph inputs");
  const int first = lua_gettop(L) + 1;
  for (int s : slots) lua_pushvalue(L, s);
  for (int j : numbers) {
    lua::push_tensor(L, number_input(L, slots[j]));
    lua_replace(L, first + j);
  }
}

// "<file:line>" of the backend function, for its errors.
std::string backend_name(lua_State* L, int fn_ref) {
  lua_Debug ar;
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn_ref);
  lua_getinfo(L, ">S", &ar);
  return std::string("<") + ar.short_src + ":" + std::to_string(ar.linedefined) + ">";
}

// An error value as text, a tc error's kind first ("ValueError: ...").
std::string shown_error(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  std::string kind;
  if (lua_istable(L, idx)) {
    if (lua_getfield(L, idx, "kind") == LUA_TSTRING) kind = std::string(lua_tostring(L, -1)) + ": ";
    lua_pop(L, 1);
  }
  return kind + error_text(L, idx);
}

// Functions, and tables or userdata whose metatable has __call.
bool callable(lua_State* L, int idx) {
  if (lua_isfunction(L, idx)) return true;
  if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return false;
  lua_pop(L, 1);
  return true;
}

}  // namespace

std::shared_ptr<const Graph> graph_of_gm(lua_State* L, int idx) {
  auto* b = static_cast<GraphBox*>(luaL_testudata(L, idx, kGraphModuleMeta));
  return b ? b->g : nullptr;
}

int lua_backend_compile(lua_State* L, int backend_fn_ref, const Graph& g,
                        const std::vector<int>& input_slots, const std::vector<int>& numbers) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, backend_fn_ref);
  push_gm(L, g);
  lua_createtable(L, int(input_slots.size()), 0);
  push_inputs(L, input_slots, numbers);
  for (int i = int(input_slots.size()); i >= 1; i--) lua_rawseti(L, -1 - i, i);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    // the backend's error, kept whole in `cause`, named as the backend's: the user's call line
    const std::string msg = "the backend function " + backend_name(L, backend_fn_ref) + " raised: " +
                            shown_error(L, -1);
    lua::push_error(L, "CompileError", msg.c_str(), 1);
    lua_rotate(L, -2, 1);
    lua_setfield(L, -2, "cause");
    return LUA_NOREF;  // the error stays on top
  }
  if (!callable(L, -1)) {
    const std::string msg = "the backend function " + backend_name(L, backend_fn_ref) + " returned " +
                            (lua_isnil(L, -1) ? std::string("nil") : std::string("a ") + luaL_typename(L, -1)) +
                            ", not a callable: it must return the function that runs the graph (gm.forward, or "
                            "a function(...) that returns the graph's outputs)";
    lua_pop(L, 1);
    lua::push_error(L, "CompileError", msg.c_str(), 1);
    return LUA_NOREF;
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

bool lua_backend_run(lua_State* L, int callable_ref, const std::vector<int>& input_slots,
                     const std::vector<int>& numbers, size_t nouts, std::vector<Tensor>* outs) {
  const int base = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, callable_ref);
  push_inputs(L, input_slots, numbers);
  if (lua_pcall(L, int(input_slots.size()), LUA_MULTRET, 0) != LUA_OK) return false;
  const int n = lua_gettop(L) - base;
  // a single table of tensors is accepted too (fx backends return tuples)
  if (n == 1 && lua_istable(L, -1) && !lua::to_tensor(L, -1)) {
    const int t = lua_gettop(L);
    for (lua_Integer i = 1; i <= lua_Integer(lua_rawlen(L, t)); i++) lua_rawgeti(L, t, i);
    lua_remove(L, t);
  }
  const int m = lua_gettop(L) - base;
  if (size_t(m) < nouts) {
    lua_settop(L, base);
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "the backend's callable returned %d values, the graph has %d outputs", m,
                  int(nouts));
    lua::push_error(L, "CompileError", msg, 1);
    return false;
  }
  for (size_t i = 0; i < nouts; i++) {
    const Tensor* t = lua::to_tensor(L, base + 1 + int(i));
    if (!t) {
      lua_settop(L, base);
      lua::push_error(L, "CompileError",
                      "the backend's callable returned a value that is not a tensor", 1);
      return false;
    }
    outs->push_back(*t);
  }
  lua_settop(L, base);
  return true;
}

}  // namespace tc::capture
