// The tensor userdata: lifetime and GC pacing, metamethods (properties, indexing, operators,
// comparisons, #, tostring) and the C methods that read metadata (size, dim, stride, item ...).
#include <algorithm>
#include <new>

#include "lua_binding.h"
#include "tc/autograd.h"
#ifdef TC_HAVE_CUDA
#include "tc/cuda.h"
#endif

namespace tc::lua {
namespace {

// The userdata: a tag (checked instead of a metatable lookup: to_tensor is on every op's path)
// and the tensor. One user value caches the userdata of x.grad.
constexpr uint64_t kTag = 0x74632e54656e736fULL;  // "tc.Tenso"
struct TensorBox {
  uint64_t tag;
  Tensor t;
};

// ---- GC pacing ---------------------------------------------------------------------------------
// A userdata of a few dozen bytes can hold megabytes of tensor memory that Lua's collector cannot
// see, so tc runs a full collection once the tensor bytes allocated since the last one reach the
// live bytes left after it (at least kMinCycleBytes): Lua's own pause of 200%, counted in tensor
// bytes. Incremental steps sized by each op's bytes (the earlier scheme) ended up finishing a
// whole cycle after nearly every op of a convolutional network, a full traversal of the Lua heap
// (~60 us with ResNet-50's modules loaded) per op, which was most of its eager CUDA forward time.
// Per thread: each DataLoader worker thread runs its own Lua state (lua_data_workers.cpp) and
// paces its own collector.
thread_local int64_t g_last_live = 0;  // Storage::live_bytes() at the last look
thread_local int64_t g_pending = 0;    // bytes allocated since the last collection
constexpr int64_t kMinCycleBytes = int64_t(192) << 20;
thread_local int64_t g_collect_at = kMinCycleBytes;

// After a full collection: the next one once as many bytes again are allocated.
void collected() {
  g_pending = 0;
  g_last_live = Storage::live_bytes();
  g_collect_at = std::max(kMinCycleBytes, g_last_live);
}

int tensor_gc(lua_State* L) {
  if (to_tensor(L, 1)) static_cast<TensorBox*>(lua_touserdata(L, 1))->t = Tensor();  // a resurrected userdata reads as freed
  return 0;
}

// ---- small helpers -----------------------------------------------------------------------------
Tensor op(Op o, Stack positional, std::vector<std::pair<std::string, Value>> kw = {}) {
  return call1(o, std::move(positional), std::move(kw));
}

int64_t to_index(lua_State* L, int idx, bool* ok) {
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, idx, &isnum);
  *ok = isnum && lua_type(L, idx) == LUA_TNUMBER;
  return v;
}

// An integer index tensor in an index table: the dim of the view it indexes (1-based) and its values.
struct TensorItem {
  int64_t dim = 0;
  Tensor index;
};

const Tensor* index_tensor(lua_State* L, int idx) {
  const Tensor* k = to_tensor(L, idx);
  if (!k) return nullptr;
  TC_CHECK(is_integral(k->dtype(), false), IndexError,
           "tensor index: an index tensor inside an index table must be an integer tensor, got %s (a bool mask "
           "indexes the whole tensor: x[mask])",
           dtype_name(k->dtype()));
  return k;
}

// One element of an index table: integer (select), {} (all), {a} (a..a kept), {a,b}, {a,b,step},
// or an integer tensor (gathered after the views, as PyTorch's advanced indexing: `x[{ {}, idx }]`).
void apply_index_item(lua_State* L, Tensor& t, int64_t& d, int item, TensorItem& ti) {
  bool ok;
  int64_t i = to_index(L, item, &ok);
  if (ok) {
    t = op(Op::select, {t, d, i});
    return;
  }
  if (const Tensor* k = index_tensor(L, item)) {
    TC_CHECK(!ti.index.defined(), NotImplementedError,
             "tensor index: only one index tensor per index table is supported (index one dim at a time)");
    TC_CHECK(d <= t.dim(), IndexError, "too many indices for tensor of dimension %lld", (long long)t.dim());
    ti = {d, *k};
    d++;
    return;
  }
  TC_CHECK(lua_type(L, item) == LUA_TTABLE, IndexError,
           "tensor index: expected an integer, a range table {start, stop[, step]} or an integer tensor, got %s",
           luaL_typename(L, item));
  lua_Integer n = (lua_Integer)lua_rawlen(L, item);
  TC_CHECK(n <= 3, IndexError, "tensor index: a range is {start, stop[, step]}, got %lld elements", (long long)n);
  int64_t r[3] = {0, 0, 1};
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, item, k);
    r[k - 1] = to_index(L, -1, &ok);
    lua_pop(L, 1);
    TC_CHECK(ok, IndexError, "tensor index: range bounds must be integers");
  }
  if (n == 1)
    t = op(Op::narrow, {t, d, r[0], int64_t(1)});
  else if (n >= 2)
    t = op(Op::slice, {t, d, r[0], r[1], r[2]});
  d++;
}

// t's shape with dim d (1-based) replaced by `mid`.
Shape replace_dim(const Shape& s, int64_t d, const Shape& mid) {
  Shape r(s.begin(), s.begin() + (d - 1));
  r.insert(r.end(), mid.begin(), mid.end());
  r.insert(r.end(), s.begin() + d, s.end());
  return r;
}

// t[.., index, ..] at dim d: index_select of the flattened index, viewed as index's shape in dim d.
Tensor gather_dim(const Tensor& t, const TensorItem& ti) {
  Tensor flat = op(Op::reshape, {ti.index, IntList{-1}});
  Tensor r = op(Op::index_select, {t, ti.dim, flat});
  Shape s = replace_dim(t.sizes(), ti.dim, ti.index.sizes());
  return op(Op::view, {r, IntList(s.begin(), s.end())});
}

// t[.., index, ..] = v at dim d, in place: the gathered slices (detached) take v as a view of them
// would (copy_ broadcasts and converts, fill_ for a number), then scatter back along d. The tracer
// records the same ops (capture/tracer_calls.cpp, Tracer::tensor_assign).
void scatter_dim(const Tensor& t, const TensorItem& ti, const Value& v) {
  const Shape gathered = replace_dim(t.sizes(), ti.dim, ti.index.sizes());
  const int64_t n = ti.index.numel();
  const Shape flat = replace_dim(t.sizes(), ti.dim, {n});
  Tensor src = op(Op::detach, {op(Op::index_select, {t, ti.dim, op(Op::reshape, {ti.index, IntList{-1}})})});
  Tensor slots = op(Op::view, {src, IntList(gathered.begin(), gathered.end())});
  op(v.is_tensor() ? Op::copy_ : Op::fill_, {slots, v});
  Shape ones(t.dim(), 1);
  ones[ti.dim - 1] = n;
  Tensor idx = op(Op::reshape, {ti.index, IntList(ones.begin(), ones.end())});
  idx = op(Op::expand, {idx, IntList(flat.begin(), flat.end())});
  op(Op::copy_, {t, op(Op::scatter, {t, ti.dim, idx, src})});
}

// x[key] for a table key: the views of its items, and the index tensor among them (if any).
Tensor index_views(lua_State* L, const Tensor& x, int key, TensorItem& ti) {
  lua_Integer n = (lua_Integer)lua_rawlen(L, key);
  TC_CHECK(n <= x.dim(), IndexError, "too many indices for tensor of dimension %lld (got %lld)", (long long)x.dim(),
           (long long)n);
  Tensor t = x;
  int64_t d = 1;  // the next dim of t to index (1-based)
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, key, k);
    apply_index_item(L, t, d, lua_gettop(L), ti);
    lua_pop(L, 1);
  }
  return t;
}

// x[key] for integer, table and tensor keys.
Tensor index_get(lua_State* L, const Tensor& x, int key) {
  bool ok;
  int64_t i = to_index(L, key, &ok);
  if (ok) return op(Op::select, {x, int64_t(1), i});
  if (const Tensor* k = to_tensor(L, key)) {
    if (k->dtype() == DType::Bool || k->dtype() == DType::UInt8) return op(Op::masked_select, {x, *k});
    TC_CHECK(is_integral(k->dtype(), false), IndexError, "tensors used as indices must be integer, bool or uint8 tensors, got %s",
             dtype_name(k->dtype()));
    TC_CHECK(x.dim() > 0, IndexError, "a 0-d tensor cannot be indexed with an index tensor");
    return gather_dim(x, {1, *k});
  }
  TC_CHECK(lua_type(L, key) == LUA_TTABLE, IndexError, "a tensor cannot be indexed with a %s", luaL_typename(L, key));
  TensorItem ti;
  Tensor t = index_views(L, x, key, ti);
  return ti.index.defined() ? gather_dim(t, ti) : t;
}

// x[key] = value, in place.
void index_set(lua_State* L, const Tensor& x, int key, int val) {
  const Tensor* k = to_tensor(L, key);
  Value v = to_value(L, val, "tensor assignment");
  TC_CHECK(v.is_tensor() || v.is_number(), ValueError, "tensor assignment: the value must be a number or a tensor, got %s",
           luaL_typename(L, val));
  if (k && (k->dtype() == DType::Bool || k->dtype() == DType::UInt8)) {
    Tensor r = v.is_tensor() ? op(Op::where, {*k, v, x}) : op(Op::masked_fill, {x, *k, v});
    op(Op::copy_, {x, r});
    return;
  }
  if (k) {
    TC_CHECK(is_integral(k->dtype(), false), IndexError, "tensors used as indices must be integer, bool or uint8 tensors, got %s",
             dtype_name(k->dtype()));
    TC_CHECK(x.dim() > 0, IndexError, "a 0-d tensor cannot be indexed with an index tensor");
    scatter_dim(x, {1, *k}, v);
    return;
  }
  Tensor target;
  TensorItem ti;
  if (lua_type(L, key) == LUA_TTABLE)
    target = index_views(L, x, key, ti);
  else
    target = index_get(L, x, key);  // a view of x
  if (ti.index.defined())
    scatter_dim(target, ti, v);
  else if (v.is_tensor())
    op(Op::copy_, {target, v});
  else
    op(Op::fill_, {target, v});
}

// ---- metamethods -------------------------------------------------------------------------------
int property(lua_State* L) {
  // 1: tensor, 2: string key (not a method)
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "tensor");
    std::string_view k = lua_tostring(L, 2);
    if (k == "shape") {
      push_size(L, t.sizes());
    } else if (k == "dtype") {
      push_dtype(L, t.dtype());
    } else if (k == "device") {
      std::string s = t.device().str();
      lua_pushlstring(L, s.data(), s.size());
    } else if (k == "requires_grad") {
      lua_pushboolean(L, t.requires_grad());
    } else if (k == "grad") {
      if (!t.impl()->grad) {
        lua_pushnil(L);
        return 1;
      }
      lua_getiuservalue(L, 1, 1);  // the grad's userdata from last time, if still current
      const Tensor* g = to_tensor(L, -1);
      if (g && g->impl() == t.impl()->grad.get()) return 1;
      lua_pop(L, 1);
      push_tensor(L, Tensor(t.impl()->grad));
      lua_pushvalue(L, -1);
      lua_setiuservalue(L, 1, 1);
    } else if (k == "is_leaf") {
      lua_pushboolean(L, autograd::is_leaf(t));
    } else if (k == "grad_fn") {
      push_grad_fn(L, t);
    } else if (k == "retains_grad") {
      lua_pushboolean(L, autograd::retains_grad(t));
    } else if (k == "ndim") {
      lua_pushinteger(L, t.dim());
    } else if (k == "T") {
      IntList dims;
      for (int64_t d = t.dim(); d >= 1; d--) dims.push_back(d);
      push_tensor(L, op(Op::permute, {t, dims}));
    } else if (k == "mT") {  // the last two dims swapped (a batch of matrices transposed)
      TC_CHECK(t.dim() >= 2, ValueError, "tensor.mT is only supported on matrices or batches of matrices, got %lld-D tensor",
               (long long)t.dim());
      push_tensor(L, op(Op::transpose, {t, int64_t(-2), int64_t(-1)}));
    } else if (k == "data") {
      push_tensor(L, op(Op::detach, {t}));
    } else {
      lua_pushnil(L);
    }
    return 1;
  });
}

int tensor_index(lua_State* L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;  // a method
    lua_pop(L, 1);
    return property(L);
  }
  int n = guarded(L, [](lua_State* L) {
    push_tensor(L, index_get(L, check_tensor(L, 1, "tensor"), 2));
    return 1;
  });
  gc_pressure(L);
  return n;
}

int tensor_newindex(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "tensor");
    if (lua_type(L, 2) == LUA_TSTRING) {
      std::string_view k = lua_tostring(L, 2);
      if (k == "requires_grad") {
        TC_CHECK(lua_type(L, 3) == LUA_TBOOLEAN, ValueError, "requires_grad must be a boolean, got %s", luaL_typename(L, 3));
        bool on = lua_toboolean(L, 3);
        TC_CHECK(!on || is_floating(t.dtype()), DTypeError,
                 "only tensors of floating point dtype can require gradients, got %s", dtype_name(t.dtype()));
        TC_CHECK(autograd::is_leaf(t) || on, ValueError,
                 "you can only change requires_grad flags of leaf tensors (x:detach() gives a tensor without "
                 "history that does not require grad)");
        Tensor(t).set_requires_grad(on);
      } else if (k == "grad") {
        if (lua_isnil(L, 3)) {
          t.impl()->grad.reset();
          lua_pushnil(L);  // nor the cached object of the old grad: a collection may free it (its memory
          lua_setiuservalue(L, 1, 1);  // may be a CUDA graph's, moved out while still referenced)
        } else {
          const Tensor& g = check_tensor(L, 3, "grad");
          TC_CHECK(g.sizes() == t.sizes(), ShapeError, "assigned grad has shape %s but the tensor has shape %s",
                   shape_string(g.sizes()).c_str(), shape_string(t.sizes()).c_str());
          TC_CHECK(g.dtype() == t.dtype(), DTypeError, "assigned grad has dtype %s but the tensor has dtype %s",
                   dtype_name(g.dtype()), dtype_name(t.dtype()));
          t.impl()->grad = g.impl_ptr();
          lua_pushvalue(L, 3);
          lua_setiuservalue(L, 1, 1);  // x.grad gives back this object
        }
      } else {
        TC_FAIL(ValueError, "cannot set field '%s' of a tensor (tensors only accept indexing assignment, "
                "requires_grad and grad)", lua_tostring(L, 2));
      }
      return 0;
    }
    index_set(L, t, 2, 3);
    return 0;
  });
}

// Binary operators: upvalue 1 is the Op; upvalue 2 (optional) a rounding mode for //.
int tensor_binary(lua_State* L) {
  int n = guarded(L, [](lua_State* L) {
    Op o = (Op)lua_tointeger(L, lua_upvalueindex(1));
    std::vector<std::pair<std::string, Value>> kw;
    if (lua_isstring(L, lua_upvalueindex(2))) kw.emplace_back("rounding_mode", std::string(lua_tostring(L, lua_upvalueindex(2))));
    Stack s{to_value(L, 1, "operand"), to_value(L, 2, "operand")};
    push_tensor(L, call1(o, std::move(s), std::move(kw)));
    return 1;
  });
  gc_pressure(L);
  return n;
}

int tensor_unary(lua_State* L) {
  int n = guarded(L, [](lua_State* L) {
    Op o = (Op)lua_tointeger(L, lua_upvalueindex(1));
    push_tensor(L, call1(o, {check_tensor(L, 1, "operand")}));
    return 1;
  });
  gc_pressure(L);
  return n;
}

// The value of a one-element tensor (or a number) for <, <=, ==.
double scalar_of(lua_State* L, int idx, const char* opname) {
  if (lua_type(L, idx) == LUA_TNUMBER) return lua_tonumber(L, idx);
  const Tensor* t = to_tensor(L, idx);
  TC_CHECK(t, ValueError, "cannot compare a tensor with a %s using '%s'", luaL_typename(L, idx), opname);
  TC_CHECK(t->numel() == 1, ValueError,
           "'%s' on a tensor with %lld elements is ambiguous: Lua's comparison operators need one-element "
           "tensors (use x:lt(y), x:le(y), x:eq(y) for elementwise masks)",
           opname, (long long)t->numel());
  return t->item_double();
}

template <int Cmp>
int tensor_compare(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    static const char* names[] = {"==", "<", "<="};
    double a = scalar_of(L, 1, names[Cmp]), b = scalar_of(L, 2, names[Cmp]);
    lua_pushboolean(L, Cmp == 0 ? a == b : Cmp == 1 ? a < b : a <= b);
    return 1;
  });
}

int tensor_len(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "tensor");
    TC_CHECK(t.dim() > 0, ValueError, "len() of a 0-d tensor");
    lua_pushinteger(L, t.sizes()[0]);
    return 1;
  });
}

int tensor_tostring(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "tensor");
    std::string s = format_tensor(t) + "\n" + tensor_footer(t);
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}

// ---- C methods ---------------------------------------------------------------------------------
int64_t dim_arg(lua_State* L, int idx, const Tensor& t) {
  bool ok;
  int64_t d = to_index(L, idx, &ok);
  TC_CHECK(ok, ValueError, "expected a dimension (an integer), got %s", luaL_typename(L, idx));
  TC_CHECK(t.dim() > 0, IndexError, "dimension specified as %lld but the tensor has no dimensions", (long long)d);
  return wrap_dim(d, t.dim());
}

int m_size(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "self");
    if (lua_isnoneornil(L, 2)) {
      push_size(L, t.sizes());
    } else {
      int64_t d = dim_arg(L, 2, t);
      lua_pushinteger(L, t.sizes()[d]);
    }
    return 1;
  });
}

int m_stride(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "self");
    if (lua_isnoneornil(L, 2)) {
      push_value(L, Value(IntList(t.strides().begin(), t.strides().end())));
    } else {
      int64_t d = dim_arg(L, 2, t);
      lua_pushinteger(L, t.strides()[d]);
    }
    return 1;
  });
}

template <int What>
int m_meta(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "self");
    switch (What) {
      case 0: lua_pushinteger(L, t.dim()); break;
      case 1: lua_pushinteger(L, t.numel()); break;
      case 2: lua_pushboolean(L, t.is_contiguous()); break;
      case 3: lua_pushinteger(L, (lua_Integer)t.itemsize()); break;
      case 4: lua_pushboolean(L, is_floating(t.dtype())); break;
      case 5: lua_pushinteger(L, t.offset()); break;
    }
    return 1;
  });
}

// ---- pinned host memory -------------------------------------------------------------------------
// x:pin_memory(): a copy in page-locked host memory (x itself if pinned already); x:is_pinned().
int m_pin_memory(lua_State* L) {
  return guarded(L, [](lua_State* L) -> int {
    const Tensor& t = check_tensor(L, 1, "pin_memory(): self");
#ifdef TC_HAVE_CUDA
    Tensor p = cuda::pin_memory(t);
    if (p.same(t)) {
      lua_settop(L, 1);
      return 1;
    }
    push_tensor(L, p);
    gc_pressure(L);
    return 1;
#else
    (void)t;
    TC_FAIL(DeviceError, "pin_memory(): pinned host memory needs CUDA, which is not available: tc was built without CUDA");
#endif
  });
}

int m_is_pinned(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "is_pinned(): self");
#ifdef TC_HAVE_CUDA
    lua_pushboolean(L, cuda::is_pinned(t));
#else
    (void)t;
    lua_pushboolean(L, 0);
#endif
    return 1;
  });
}

// tc._C.to_device_non_blocking(x, device): the to_device op with a copy from pinned memory left
// running on the stream (x:to(device, {non_blocking = true})).
int l_to_device_non_blocking(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    const Tensor& t = check_tensor(L, 1, "to(): self");
    TC_CHECK(lua_type(L, 2) == LUA_TSTRING, ValueError, "to(): expected a device string such as \"cuda\", got %s",
             luaL_typename(L, 2));
    Device d = Device::parse(lua_tostring(L, 2));
#ifdef TC_HAVE_CUDA
    cuda::NonBlocking scope;
#endif
    push_tensor(L, call1(Op::to_device, {t, d}));
    gc_pressure(L);
    return 1;
  });
}

}  // namespace

const Tensor* to_tensor(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TUSERDATA || lua_rawlen(L, idx) != sizeof(TensorBox)) return nullptr;
  auto* b = static_cast<TensorBox*>(lua_touserdata(L, idx));
  return b->tag == kTag && b->t.defined() ? &b->t : nullptr;
}

const Tensor& check_tensor(lua_State* L, int idx, const char* what) {
  const Tensor* t = to_tensor(L, idx);
  if (!t) TC_FAIL(ValueError, "%s must be a tensor, got %s", what, luaL_typename(L, idx));
  return *t;
}

void push_tensor(lua_State* L, const Tensor& t) {
  TC_ASSERT(t.defined(), "push_tensor of an undefined tensor");
  void* mem = lua_newuserdatauv(L, sizeof(TensorBox), 1);
  new (mem) TensorBox{kTag, t};
  luaL_setmetatable(L, kTensorMeta);
}

thread_local void (*g_tensor_work_hook)(lua_State* L) = nullptr;

void gc_pressure(lua_State* L) {
  if (g_tensor_work_hook) [[unlikely]] g_tensor_work_hook(L);
  int64_t live = Storage::live_bytes();
  if (live > g_last_live) g_pending += live - g_last_live;
  g_last_live = live;
  // live bytes fell (a collection the user ran, tensors freed): the next cycle comes sooner
  if (live < g_collect_at) g_collect_at = std::max(kMinCycleBytes, live);
  if (g_pending < g_collect_at) return;
  lua_gc(L, LUA_GCCOLLECT);
  collected();
}

namespace {
// ---- memory pressure ---------------------------------------------------------------------------
// A failed allocation (a GPU full of tensors that only the collector knows are garbage) runs a full
// collection of every open Lua state, then the allocation is retried (Storage::set_pressure_hook).
std::vector<lua_State*>& open_states() {
  static std::vector<lua_State*> states;
  return states;
}

void collect_all_states() {
  for (lua_State* S : open_states()) lua_gc(S, LUA_GCCOLLECT);
  collected();
}

int state_closing(lua_State* L) {  // __gc of a registry sentinel: runs when the state closes
  lua_State* main = static_cast<lua_State*>(lua_touserdata(L, lua_upvalueindex(1)));
  std::erase(open_states(), main);
  return 0;
}

void watch_memory_pressure(lua_State* L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State* main = lua_tothread(L, -1);
  lua_pop(L, 1);
  if (std::find(open_states().begin(), open_states().end(), main) != open_states().end()) return;
  open_states().push_back(main);
  lua_newuserdatauv(L, 1, 0);
  lua_newtable(L);
  lua_pushlightuserdata(L, main);
  lua_pushcclosure(L, state_closing, 1);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.memory_pressure_sentinel");
  Storage::set_pressure_hook(collect_all_states);
}
}  // namespace

void open_tensor_type(lua_State* L) {
  watch_memory_pressure(L);
  lua_getfield(L, -1, "_C");
  lua_pushcfunction(L, l_printoptions);
  lua_setfield(L, -2, "printoptions");
  lua_pushcfunction(L, l_to_device_non_blocking);
  lua_setfield(L, -2, "to_device_non_blocking");
  lua_pop(L, 1);
  // tc table at -1
  // tc.Tensor: the method table (op functions are added by open_ops, Lua sugar by tc._tensor).
  lua_newtable(L);
  const luaL_Reg methods[] = {
      {"size", m_size},         {"stride", m_stride},        {"dim", m_meta<0>},
      {"numel", m_meta<1>},     {"nelement", m_meta<1>},     {"is_contiguous", m_meta<2>},
      {"element_size", m_meta<3>}, {"is_floating_point", m_meta<4>}, {"storage_offset", m_meta<5>},
      {"pin_memory", m_pin_memory}, {"is_pinned", m_is_pinned},  {nullptr, nullptr}};
  luaL_setfuncs(L, methods, 0);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "Tensor");  // tc.Tensor = methods

  luaL_newmetatable(L, kTensorMeta);
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, tensor_index, 1);
  lua_setfield(L, -2, "__index");
  const luaL_Reg meta[] = {{"__newindex", tensor_newindex}, {"__gc", tensor_gc},
                           {"__len", tensor_len},           {"__tostring", tensor_tostring},
                           {"__eq", tensor_compare<0>},     {"__lt", tensor_compare<1>},
                           {"__le", tensor_compare<2>},     {nullptr, nullptr}};
  luaL_setfuncs(L, meta, 0);
  struct { const char* name; Op op; const char* mode; } binops[] = {
      {"__add", Op::add, nullptr},          {"__sub", Op::sub, nullptr},         {"__mul", Op::mul, nullptr},
      {"__div", Op::div, nullptr},          {"__mod", Op::remainder, nullptr},   {"__pow", Op::pow, nullptr},
      {"__idiv", Op::div, "floor"},         {"__band", Op::bitwise_and, nullptr}, {"__bor", Op::bitwise_or, nullptr},
      {"__bxor", Op::bitwise_xor, nullptr}};
  for (auto& b : binops) {
    lua_pushinteger(L, (lua_Integer)b.op);
    if (b.mode)
      lua_pushstring(L, b.mode);
    else
      lua_pushnil(L);
    lua_pushcclosure(L, tensor_binary, 2);
    lua_setfield(L, -2, b.name);
  }
  lua_pushinteger(L, (lua_Integer)Op::neg);
  lua_pushcclosure(L, tensor_unary, 1);
  lua_setfield(L, -2, "__unm");
  lua_pushinteger(L, (lua_Integer)Op::bitwise_not);
  lua_pushcclosure(L, tensor_unary, 1);
  lua_setfield(L, -2, "__bnot");
  lua_pop(L, 2);  // metatable, methods
}

}  // namespace tc::lua
