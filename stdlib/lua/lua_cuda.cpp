// tc.cuda: availability, synchronize, memory statistics, streams (tc.cuda.Stream, current_stream,
// set_stream, use_stream), events (tc.cuda.Event) and x:record_stream(s). tc.cuda.stream(s, fn)
// is Lua (tc._cuda.lua). Without a usable GPU, or in a build without the CUDA toolkit, everything
// but is_available / device_count / the statistics (memory, tc.cuda.graph_stats()) raises
// DeviceError with the reason.
#include <cstring>
#include <new>

#include "lua_binding.h"
#include "tc/cuda_graph.h"  // CudaGraphStats (also without CUDA: zeros)
#ifdef TC_HAVE_CUDA
#include "tc/cuda.h"
#endif

namespace tc::lua {
namespace {

void require_cuda(const char* what) {
  std::string why = "tc was built without the CUDA toolkit";
#ifdef TC_HAVE_CUDA
  if (cuda::is_available(&why)) return;
#endif
  TC_FAIL(DeviceError, "tc.cuda.%s: CUDA is not available (%s)", what, why.c_str());
}

int l_is_available(lua_State* L) {
#ifdef TC_HAVE_CUDA
  lua_pushboolean(L, cuda::is_available());
#else
  lua_pushboolean(L, 0);
#endif
  return 1;
}

// Compile-only mode (cuda::set_compile_only: "cuda" tensors in host memory, kernels compiled by
// NVRTC and never launched) lets the cuda backend compile on a machine without a GPU.
int l_compile_only(lua_State* L) {
#ifdef TC_HAVE_CUDA
  lua_pushboolean(L, cuda::compile_only());
#else
  lua_pushboolean(L, 0);
#endif
  return 1;
}

int l_device_count(lua_State* L) {
#ifdef TC_HAVE_CUDA
  lua_pushinteger(L, cuda::device_count());
#else
  lua_pushinteger(L, 0);
#endif
  return 1;
}

#ifdef TC_HAVE_CUDA
constexpr const char* kStreamMeta = "tc.cuda.Stream";
constexpr const char* kEventMeta = "tc.cuda.Event";
constexpr const char* kStreamContextMeta = "tc.cuda.StreamContext";

// A device argument: nil (cuda:0), an ordinal, "cuda"/"cuda:N", or a table with a `device` field.
int device_arg(lua_State* L, int idx, const char* what) {
  switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL: return 0;
    case LUA_TNUMBER:
      TC_CHECK(lua_isinteger(L, idx) && lua_tointeger(L, idx) >= 0, ValueError,
               "%s: a device ordinal must be an integer >= 0", what);
      return (int)lua_tointeger(L, idx);
    case LUA_TSTRING: {
      Device d = Device::parse(lua_tostring(L, idx));
      TC_CHECK(d.is_cuda(), DeviceError, "%s: expected a CUDA device, got \"%s\"", what, lua_tostring(L, idx));
      return d.index;
    }
    case LUA_TTABLE: {
      lua_getfield(L, idx, "device");  // plain option tables: no metamethod runs
      int d = device_arg(L, lua_gettop(L), what);
      lua_pop(L, 1);
      return d;
    }
    default: TC_FAIL(ValueError, "%s: expected a device, got %s", what, luaL_typename(L, idx));
  }
}

void push_stream(lua_State* L, cuda::Stream s) {
  *static_cast<cuda::Stream*>(lua_newuserdatauv(L, sizeof(cuda::Stream), 0)) = s;
  luaL_setmetatable(L, kStreamMeta);
}
cuda::Stream check_stream(lua_State* L, int idx, const char* what) {
  auto* s = static_cast<cuda::Stream*>(luaL_testudata(L, idx, kStreamMeta));
  TC_CHECK(s, ValueError, "%s: expected a tc.cuda.Stream, got %s", what, luaL_typename(L, idx));
  return *s;
}
cuda::Event& check_event(lua_State* L, int idx, const char* what) {
  auto* e = static_cast<cuda::Event*>(luaL_testudata(L, idx, kEventMeta));
  TC_CHECK(e, ValueError, "%s: expected a tc.cuda.Event, got %s", what, luaL_typename(L, idx));
  return *e;
}
// The stream at idx, or the current stream of `device` when the argument is absent.
cuda::Stream stream_or_current(lua_State* L, int idx, int device, const char* what) {
  return lua_isnoneornil(L, idx) ? cuda::current_stream(device) : check_stream(L, idx, what);
}

cuda::Event& push_event(lua_State* L, bool timing) {
  auto* e = new (lua_newuserdatauv(L, sizeof(cuda::Event), 0)) cuda::Event(timing);
  luaL_setmetatable(L, kEventMeta);
  return *e;
}

// ---- tc.cuda functions --------------------------------------------------------------------------
int l_synchronize(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda("synchronize()");
    cuda::synchronize(lua_isnoneornil(L, 1) ? -1 : device_arg(L, 1, "tc.cuda.synchronize()"));
    return 0;
  });
}
template <bool Start> int l_profiler(lua_State* L) {  // tc.cuda.profiler_start() / profiler_stop()
  return guarded(L, [](lua_State*) {
    require_cuda(Start ? "profiler_start()" : "profiler_stop()");
    cuda::profiler_range(Start);
    return 0;
  });
}
int l_stream_new(lua_State* L) {  // tc.cuda.Stream([device | {device=}])
  return guarded(L, [](lua_State* L) {
    require_cuda("Stream()");
    push_stream(L, cuda::Stream::create(device_arg(L, 1, "tc.cuda.Stream()")));
    return 1;
  });
}
int l_current_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda("current_stream()");
    push_stream(L, cuda::current_stream(device_arg(L, 1, "tc.cuda.current_stream()")));
    return 1;
  });
}
int l_default_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda("default_stream()");
    push_stream(L, cuda::default_stream(device_arg(L, 1, "tc.cuda.default_stream()")));
    return 1;
  });
}
int l_set_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda("set_stream()");
    cuda::set_current_stream(check_stream(L, 1, "tc.cuda.set_stream()"));
    return 0;
  });
}
// local _ <close> = tc.cuda.use_stream(s): s current until the variable goes out of scope.
int l_use_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda("use_stream()");
    cuda::Stream s = check_stream(L, 1, "tc.cuda.use_stream()");
    cuda::Stream prev = cuda::current_stream(s.device);
    cuda::set_current_stream(s);
    *static_cast<cuda::Stream*>(lua_newuserdatauv(L, sizeof(cuda::Stream), 0)) = prev;
    luaL_setmetatable(L, kStreamContextMeta);
    return 1;
  });
}
int stream_context_close(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    auto* prev = static_cast<cuda::Stream*>(luaL_testudata(L, 1, kStreamContextMeta));
    if (prev) cuda::set_current_stream(*prev);
    return 0;
  });
}
int l_event_new(lua_State* L) {  // tc.cuda.Event([{enable_timing=}])
  return guarded(L, [](lua_State* L) {
    require_cuda("Event()");
    bool timing = false;
    if (lua_type(L, 1) == LUA_TTABLE) {
      lua_getfield(L, 1, "enable_timing");
      timing = lua_toboolean(L, -1);
      lua_pop(L, 1);
    } else {
      TC_CHECK(lua_isnoneornil(L, 1), ValueError, "tc.cuda.Event(): expected an options table, got %s",
               luaL_typename(L, 1));
    }
    push_event(L, timing);
    return 1;
  });
}
// x:record_stream(s)
int m_record_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "self");
    require_cuda("record_stream()");
    cuda::record_stream(t, check_stream(L, 2, "record_stream()"));
    return 0;
  });
}

// ---- Stream methods -----------------------------------------------------------------------------
int s_synchronize(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    check_stream(L, 1, "Stream:synchronize()").synchronize();
    return 0;
  });
}
int s_query(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    lua_pushboolean(L, check_stream(L, 1, "Stream:query()").query());
    return 1;
  });
}
int s_wait_stream(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    check_stream(L, 1, "Stream:wait_stream()").wait_stream(check_stream(L, 2, "Stream:wait_stream()"));
    return 0;
  });
}
int s_wait_event(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    check_stream(L, 1, "Stream:wait_event()").wait_event(check_event(L, 2, "Stream:wait_event()"));
    return 0;
  });
}
int s_record_event(lua_State* L) {  // s:record_event([e]) -> e (a new event when absent)
  return guarded(L, [](lua_State* L) {
    cuda::Stream s = check_stream(L, 1, "Stream:record_event()");
    if (lua_isnoneornil(L, 2)) {
      push_event(L, false).record(s);
    } else {
      check_event(L, 2, "Stream:record_event()").record(s);
      lua_pushvalue(L, 2);
    }
    return 1;
  });
}
int stream_index(lua_State* L) {  // fields device ("cuda:0") and id; then the methods
  auto* s = static_cast<cuda::Stream*>(luaL_checkudata(L, 1, kStreamMeta));
  const char* k = lua_tostring(L, 2);
  if (k && std::strcmp(k, "device") == 0) {
    lua_pushfstring(L, "cuda:%d", s->device);
  } else if (k && std::strcmp(k, "id") == 0) {
    lua_pushinteger(L, s->id);
  } else {
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
  }
  return 1;
}
int stream_eq(lua_State* L) {
  auto* a = static_cast<cuda::Stream*>(luaL_testudata(L, 1, kStreamMeta));
  auto* b = static_cast<cuda::Stream*>(luaL_testudata(L, 2, kStreamMeta));
  lua_pushboolean(L, a && b && *a == *b);
  return 1;
}
int stream_tostring(lua_State* L) {
  auto* s = static_cast<cuda::Stream*>(luaL_checkudata(L, 1, kStreamMeta));
  if (s->id == 0)
    lua_pushfstring(L, "<tc.cuda.Stream device=cuda:%d default>", s->device);
  else
    lua_pushfstring(L, "<tc.cuda.Stream device=cuda:%d id=%d>", s->device, s->id);
  return 1;
}

// ---- Event methods ------------------------------------------------------------------------------
int device_of(const cuda::Event& e) { return e.recorded() ? e.device() : 0; }
int e_record(lua_State* L) {  // e:record([stream]): the current stream by default
  return guarded(L, [](lua_State* L) {
    cuda::Event& e = check_event(L, 1, "Event:record()");
    e.record(stream_or_current(L, 2, device_of(e), "Event:record()"));
    return 0;
  });
}
int e_synchronize(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    check_event(L, 1, "Event:synchronize()").synchronize();
    return 0;
  });
}
int e_query(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    lua_pushboolean(L, check_event(L, 1, "Event:query()").query());
    return 1;
  });
}
int e_elapsed_time(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const cuda::Event& e = check_event(L, 1, "Event:elapsed_time()");
    lua_pushnumber(L, e.elapsed_time(check_event(L, 2, "Event:elapsed_time()")));
    return 1;
  });
}
int e_wait(lua_State* L) {  // e:wait([stream]): the current stream by default
  return guarded(L, [](lua_State* L) {
    const cuda::Event& e = check_event(L, 1, "Event:wait()");
    e.wait(stream_or_current(L, 2, device_of(e), "Event:wait()"));
    return 0;
  });
}
int event_gc(lua_State* L) {
  if (auto* e = static_cast<cuda::Event*>(luaL_testudata(L, 1, kEventMeta))) e->~Event();
  return 0;
}
int event_tostring(lua_State* L) {
  auto* e = static_cast<cuda::Event*>(luaL_checkudata(L, 1, kEventMeta));
  lua_pushfstring(L, "<tc.cuda.Event%s%s>", e->timing() ? " timing" : "", e->recorded() ? " recorded" : "");
  return 1;
}

void new_class(lua_State* L, const char* meta, const luaL_Reg* meta_fns, const luaL_Reg* methods) {
  luaL_newmetatable(L, meta);
  luaL_setfuncs(L, meta_fns, 0);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "methods");
  lua_pop(L, 1);
}
#else
// Without the toolkit: every stream and event function raises DeviceError (upvalue 1: its name).
int l_unavailable(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    require_cuda(lua_tostring(L, lua_upvalueindex(1)));
    return 0;
  });
}
#endif

void push_graph_stats(lua_State* L, const cuda::CudaGraphStats& s) {
  lua_createtable(L, 0, 11);
  const std::pair<const char*, int64_t> fields[] = {{"captures", s.captures},
                                                    {"abandoned", s.abandoned},
                                                    {"replays", s.replays},
                                                    {"outputs_handed", s.outputs_handed},
                                                    {"outputs_moved", s.outputs_moved},
                                                    {"bytes_moved", s.bytes_moved},
                                                    {"collections", s.collections},
                                                    {"inputs_copied", s.inputs_copied},
                                                    {"bytes_copied", s.bytes_copied},
                                                    {"checks_later", s.checks_later},
                                                    {"check_waits", s.check_waits}};
  for (const auto& [name, v] : fields) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, name);
  }
}

}  // namespace

void open_cuda(lua_State* L) {
  // tc table at -1
  lua_newtable(L);
  const luaL_Reg always[] = {{"is_available", l_is_available}, {"device_count", l_device_count},
                             {"_compile_only", l_compile_only}, {nullptr, nullptr}};
  luaL_setfuncs(L, always, 0);
#ifdef TC_HAVE_CUDA
  const luaL_Reg fns[] = {{"synchronize", l_synchronize},
                          {"profiler_start", l_profiler<true>},
                          {"profiler_stop", l_profiler<false>},
                          {"Stream", l_stream_new},
                          {"current_stream", l_current_stream},
                          {"default_stream", l_default_stream},
                          {"set_stream", l_set_stream},
                          {"use_stream", l_use_stream},
                          {"Event", l_event_new},
                          {nullptr, nullptr}};
  luaL_setfuncs(L, fns, 0);
  const luaL_Reg stream_meta[] = {{"__index", stream_index}, {"__eq", stream_eq}, {"__tostring", stream_tostring},
                                  {nullptr, nullptr}};
  const luaL_Reg stream_methods[] = {{"synchronize", s_synchronize}, {"query", s_query},
                                     {"wait_stream", s_wait_stream}, {"wait_event", s_wait_event},
                                     {"record_event", s_record_event}, {nullptr, nullptr}};
  new_class(L, kStreamMeta, stream_meta, stream_methods);
  const luaL_Reg event_meta[] = {{"__gc", event_gc}, {"__tostring", event_tostring}, {nullptr, nullptr}};
  const luaL_Reg event_methods[] = {{"record", e_record}, {"synchronize", e_synchronize}, {"query", e_query},
                                    {"elapsed_time", e_elapsed_time}, {"wait", e_wait}, {nullptr, nullptr}};
  new_class(L, kEventMeta, event_meta, event_methods);
  luaL_getmetatable(L, kEventMeta);  // events index their method table directly
  lua_getfield(L, -1, "methods");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  const luaL_Reg context_meta[] = {{"__close", stream_context_close}, {nullptr, nullptr}};
  const luaL_Reg none[] = {{nullptr, nullptr}};
  new_class(L, kStreamContextMeta, context_meta, none);
  lua_getfield(L, -2, "Tensor");
  lua_pushcfunction(L, m_record_stream);
  lua_setfield(L, -2, "record_stream");
  lua_pop(L, 1);
  // memory_allocated / max_memory_allocated / memory_reserved ([device]) in bytes; 0 without CUDA.
  auto stat = [](lua_State* L, const char* name, lua_CFunction f) {
    lua_pushcfunction(L, f);
    lua_setfield(L, -2, name);
  };
  stat(L, "memory_allocated", [](lua_State* L) {
    lua_pushinteger(L, device_allocator(DeviceType::CUDA) ? cuda::memory_allocated((int)luaL_optinteger(L, 1, 0)) : 0);
    return 1;
  });
  stat(L, "max_memory_allocated", [](lua_State* L) {
    lua_pushinteger(L, device_allocator(DeviceType::CUDA) ? cuda::max_memory_allocated((int)luaL_optinteger(L, 1, 0)) : 0);
    return 1;
  });
  stat(L, "memory_reserved", [](lua_State* L) {
    lua_pushinteger(L, device_allocator(DeviceType::CUDA) ? cuda::memory_reserved((int)luaL_optinteger(L, 1, 0)) : 0);
    return 1;
  });
  stat(L, "empty_cache", [](lua_State*) {
    if (device_allocator(DeviceType::CUDA)) cuda::empty_cache();
    return 0;
  });
  // {captures, abandoned, replays, outputs_handed, outputs_moved, bytes_moved, collections,
  // inputs_copied, bytes_copied, checks_later, check_waits}: CUDA graphs of mode = "reduce-overhead"
  // (tc/cuda_graph.h)
  stat(L, "graph_stats", [](lua_State* L) {
    push_graph_stats(L, cuda::cuda_graph_stats());
    return 1;
  });
#else
  for (const char* name : {"synchronize()", "Stream()", "current_stream()", "default_stream()", "set_stream()",
                           "use_stream()", "Event()"}) {
    lua_pushstring(L, name);
    lua_pushcclosure(L, l_unavailable, 1);
    lua_setfield(L, -2, std::string(name, std::strlen(name) - 2).c_str());
  }
  lua_getfield(L, -2, "Tensor");
  lua_pushstring(L, "record_stream()");
  lua_pushcclosure(L, l_unavailable, 1);
  lua_setfield(L, -2, "record_stream");
  lua_pop(L, 1);
  for (const char* name : {"memory_allocated", "max_memory_allocated", "memory_reserved"}) {
    lua_pushcfunction(L, [](lua_State* L) {
      lua_pushinteger(L, 0);
      return 1;
    });
    lua_setfield(L, -2, name);
  }
  lua_pushcfunction(L, [](lua_State*) { return 0; });
  lua_setfield(L, -2, "empty_cache");
  lua_pushcfunction(L, [](lua_State* L) {
    push_graph_stats(L, cuda::CudaGraphStats{});
    return 1;
  });
  lua_setfield(L, -2, "graph_stats");
#endif
  lua_setfield(L, -2, "cuda");
}

}  // namespace tc::lua
