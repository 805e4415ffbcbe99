// The C half of tc.distributed (tc.distributed.lua is the user-facing half): one default process
// group per Lua state's process (as torch's default group), created by tc._C.dist_init and used
// by the collective primitives below. Async collectives return a tc.distributed.Work userdata.
#include <memory>
#include <new>

#include "lua_binding.h"
#include "tc/distributed.h"

namespace tc::lua {
namespace {

constexpr const char* kWorkMeta = "tc.distributed.Work";

// Never destroyed at exit (a communicator torn down after the driver is gone would crash):
// destroy_process_group releases them.
std::shared_ptr<dist::Store>& g_store = *new std::shared_ptr<dist::Store>;
std::shared_ptr<dist::ProcessGroup>& g_group = *new std::shared_ptr<dist::ProcessGroup>;

dist::ProcessGroup& group(const char* what) {
  TC_CHECK(g_group, ValueError,
           "tc.distributed.%s: the default process group is not initialized (call "
           "tc.distributed.init_process_group first)",
           what);
  return *g_group;
}

std::string str_arg(lua_State* L, int idx, const char* what) {
  TC_CHECK(lua_type(L, idx) == LUA_TSTRING, ValueError, "%s must be a string", what);
  return lua_tostring(L, idx);
}
int64_t int_arg(lua_State* L, int idx, const char* what) {
  TC_CHECK(lua_isinteger(L, idx), ValueError, "%s must be an integer", what);
  return lua_tointeger(L, idx);
}
Tensor& tensor_arg(lua_State* L, int idx, const char* what) {
  return const_cast<Tensor&>(check_tensor(L, idx, what));
}

// Pushes the work (async) or waits for it now and pushes nothing.
int finish(lua_State* L, std::unique_ptr<dist::Work> w, bool async) {
  if (!async) {
    w->wait();
    return 0;
  }
  void* ud = lua_newuserdatauv(L, sizeof(dist::Work*), 0);
  *static_cast<dist::Work**>(ud) = w.release();
  luaL_setmetatable(L, kWorkMeta);
  return 1;
}

dist::Work*& work_at(lua_State* L, int idx) {
  auto** w = static_cast<dist::Work**>(luaL_testudata(L, idx, kWorkMeta));
  TC_CHECK(w, ValueError, "expected a tc.distributed.Work");
  return *w;
}

// dist_init(backend, host, port, rank, world_size, timeout_s, check_collectives)
int l_init(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(!g_group, ValueError,
             "tc.distributed.init_process_group: the default process group is already initialized");
    std::string backend = str_arg(L, 1, "backend");
    std::string host = str_arg(L, 2, "MASTER_ADDR");
    int port = (int)int_arg(L, 3, "MASTER_PORT");
    int rank = (int)int_arg(L, 4, "rank"), world = (int)int_arg(L, 5, "world_size");
    double timeout = lua_tonumber(L, 6);
    bool check = lua_isnoneornil(L, 7) || lua_toboolean(L, 7);
    TC_CHECK(world >= 1 && rank >= 0 && rank < world, ValueError,
             "tc.distributed.init_process_group: rank %d is not in [0, world_size=%d)", rank,
             world);
    auto store = dist::Store::connect(host, port, rank == 0, timeout, rank);
    g_group = dist::ProcessGroup::create(backend, store, rank, world, timeout, check);
    g_store = std::move(store);
    return 0;
  });
}

int l_destroy(lua_State* L) {
  return guarded(L, [](lua_State*) {
    if (g_group) g_group->shutdown();
    g_group.reset();
    g_store.reset();
    return 0;
  });
}

int l_info(lua_State* L) {
  if (!g_group) return 0;
  lua_pushinteger(L, g_group->rank());
  lua_pushinteger(L, g_group->world_size());
  lua_pushstring(L, g_group->backend().c_str());
  return 3;
}

// dist_all_reduce(t, op, async)
int l_all_reduce(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor& t = tensor_arg(L, 1, "all_reduce(tensor)");
    auto op = dist::parse_reduce_op(str_arg(L, 2, "op"));
    return finish(L, group("all_reduce").all_reduce(t, op), lua_toboolean(L, 3));
  });
}
// dist_broadcast(t, src, async)
int l_broadcast(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor& t = tensor_arg(L, 1, "broadcast(tensor)");
    int src = (int)int_arg(L, 2, "broadcast: src");
    return finish(L, group("broadcast").broadcast(t, src), lua_toboolean(L, 3));
  });
}
// dist_all_gather(out, t, async)
int l_all_gather(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor& out = tensor_arg(L, 1, "all_gather(output)");
    const Tensor& t = check_tensor(L, 2, "all_gather(tensor)");
    return finish(L, group("all_gather").all_gather(out, t), lua_toboolean(L, 3));
  });
}
// dist_reduce_scatter(out, in, op, async)
int l_reduce_scatter(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Tensor& out = tensor_arg(L, 1, "reduce_scatter(output)");
    const Tensor& in = check_tensor(L, 2, "reduce_scatter(input)");
    auto op = dist::parse_reduce_op(str_arg(L, 3, "op"));
    return finish(L, group("reduce_scatter").reduce_scatter(out, in, op), lua_toboolean(L, 4));
  });
}
// dist_all_gather_bytes(s) -> {rank 0's s, rank 1's, ...}: host-side metadata (DDP's model check)
int l_all_gather_bytes(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    size_t n;
    const char* s = lua_tolstring(L, 1, &n);
    TC_CHECK(s && lua_type(L, 1) == LUA_TSTRING, ValueError, "all_gather_bytes: expected a string");
    std::vector<std::string> all = group("all_gather_object").all_gather_bytes(std::string(s, n));
    lua_createtable(L, (int)all.size(), 0);
    for (size_t i = 0; i < all.size(); i++) {
      lua_pushlstring(L, all[i].data(), all[i].size());
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
  });
}
int l_barrier(lua_State* L) {
  return guarded(L, [](lua_State*) {
    group("barrier").barrier();
    return 0;
  });
}

// Store access for tests and helpers: dist_store_set(k, v), dist_store_get(k), dist_store_add(k, n)
int l_store_set(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    group("store");
    size_t n;
    const char* v = lua_tolstring(L, 2, &n);
    TC_CHECK(v, ValueError, "store.set: the value must be a string");
    g_store->set(str_arg(L, 1, "store.set: key"), std::string(v, n));
    return 0;
  });
}
int l_store_get(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    group("store");
    std::string v = g_store->get(str_arg(L, 1, "store.get: key"));
    lua_pushlstring(L, v.data(), v.size());
    return 1;
  });
}
int l_store_add(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    group("store");
    lua_pushinteger(
        L, g_store->add(str_arg(L, 1, "store.add: key"), int_arg(L, 2, "store.add: amount")));
    return 1;
  });
}

int l_nccl_available(lua_State* L) {
#ifdef TC_HAVE_CUDA
  std::string why;
  bool ok = dist::nccl_available(&why);
  lua_pushboolean(L, ok);
  lua_pushstring(L, why.c_str());
#else
  lua_pushboolean(L, 0);
  lua_pushstring(L, "tc was built without the CUDA toolkit");
#endif
  return 2;
}

int l_work_wait(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    dist::Work* w = work_at(L, 1);
    TC_CHECK(w, ValueError, "Work:wait(): the work was released");
    w->wait();
    lua_pushboolean(L, 1);
    return 1;
  });
}
int l_work_done(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    dist::Work* w = work_at(L, 1);
    lua_pushboolean(L, !w || w->is_completed());
    return 1;
  });
}
int l_work_gc(lua_State* L) {
  auto** w = static_cast<dist::Work**>(luaL_testudata(L, 1, kWorkMeta));
  if (w && *w) {
    delete *w;
    *w = nullptr;
  }
  return 0;
}

}  // namespace

void open_distributed(lua_State* L) {
  luaL_newmetatable(L, kWorkMeta);
  const luaL_Reg methods[] = {
      {"wait", l_work_wait}, {"is_completed", l_work_done}, {nullptr, nullptr}};
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_work_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  lua_getfield(L, -1, "_C");
  const luaL_Reg fns[] = {{"dist_init", l_init},
                          {"dist_destroy", l_destroy},
                          {"dist_info", l_info},
                          {"dist_all_reduce", l_all_reduce},
                          {"dist_broadcast", l_broadcast},
                          {"dist_all_gather", l_all_gather},
                          {"dist_reduce_scatter", l_reduce_scatter},
                          {"dist_barrier", l_barrier},
                          {"dist_all_gather_bytes", l_all_gather_bytes},
                          {"dist_store_set", l_store_set},
                          {"dist_store_get", l_store_get},
                          {"dist_store_add", l_store_add},
                          {"dist_nccl_available", l_nccl_available},
                          {nullptr, nullptr}};
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}

}  // namespace tc::lua
