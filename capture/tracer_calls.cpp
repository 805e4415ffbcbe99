// Tracer semantics: indexing (raw reads with guards, __index chains), writes (recorded side
// effects), arithmetic (constant folding, tensor ops, metamethods), comparisons, calls (inlined
// Lua functions, tc ops as graph nodes, modelled builtins) and tensor properties.
#include <cmath>
#include <cstring>

#include "lua_binding.h"
#include "tracer.h"

namespace tc::capture {

using vm::OpCode;

// Lua converts float keys with an integer value to integers (t[1.0] is t[1]).
Var normalize_key(const Var& k) {
  if (k.k == Var::K::Float && std::floor(k.f) == k.f && std::fabs(k.f) < 9.2e18)
    return Var::integer(int64_t(k.f));
  return k;
}

namespace {
const char* const kArithEvents[] = {"__add", "__sub",  "__mul",  "__mod", "__pow",
                                    "__div", "__idiv", "__band", "__bor", "__bxor",
                                    "__shl", "__shr",  "__unm",  "__bnot"};

}  // namespace

std::string key_string(const Var& k) {
  switch (k.k) {
    case Var::K::Str:
      return "s" + k.s;
    case Var::K::Int:
      return "i" + std::to_string(k.i);
    case Var::K::Float: {
      char buf[40];  // every bit: keys 0.1 and 0.1000001 are different keys
      std::snprintf(buf, sizeof buf, "f%.17g", k.f);
      return buf;
    }
    case Var::K::Bool:
      return k.b ? "btrue" : "bfalse";
    default:
      return "";
  }
}

namespace {

bool same_const(const Var& a, const Var& b) {
  if (a.is_number() && b.is_number()) {
    if (a.k == Var::K::Int && b.k == Var::K::Int) return a.i == b.i;
    return a.num() == b.num();
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case Var::K::Nil:
      return true;
    case Var::K::Bool:
      return a.b == b.b;
    case Var::K::Str:
      return a.s == b.s;
    case Var::K::Object:
      return a.obj == b.obj;
    case Var::K::Table:
    case Var::K::Closure:
      return a.id == b.id;
    case Var::K::Tensor:
      return a.ref == b.ref;
    default:
      return false;
  }
}
}  // namespace

Var Tracer::new_table() {
  tables_.push_back({});
  Var v;
  v.k = Var::K::Table;
  v.id = int(tables_.size()) - 1;
  return v;
}

Var Tracer::size_table(const Shape& s) {
  Var v = new_table();
  tables_[v.id].is_size = true;
  for (int64_t d : s) tables_[v.id].array.push_back(Var::integer(d));
  return v;
}

// ---- indexing ----------------------------------------------------------------------------------

static int model_find(const ModelTable& t, const Var& key) {
  for (size_t j = 0; j < t.hash.size(); j++)
    if (same_const(t.hash[j].first, key)) return int(j);
  return -1;
}

Var Tracer::raw_get(const Var& t, const Var& key_in) {
  const Var key = normalize_key(spec(key_in));
  if (t.k == Var::K::Table) {
    const ModelTable& m = tables_[t.id];
    if (key.k == Var::K::Int && key.i >= 1 && key.i <= int64_t(m.array.size()))
      return m.array[key.i - 1];
    int j = model_find(m, key);
    return j >= 0 ? m.hash[j].second : Var::nil();
  }
  if (!overlay_.empty())
    if (const std::string ks = key_string(key); !ks.empty())
      if (auto it = overlay_.find({t.obj, ks}); it != overlay_.end()) return it->second;
  int src;
  if (key.k == Var::K::Str || key.k == Var::K::Bool) {
    // A Field source reads K[n] as the key; n at creation (-1 for booleans) keeps t[true]
    // and t["true"] apart, then becomes the key's K index.
    const int64_t tag = key.k == Var::K::Bool ? -1 : 0;
    src = e_.guards.source(SrcKind::Field, t.src, tag,
                           key.k == Var::K::Bool ? (key.b ? "true" : "false") : key.s);
    if (e_.guards.sources[src].n == tag) {
      push_var(key);
      e_.guards.sources[src].n = add_k(-1);
      lua_pop(L, 1);
    }
  } else if (key.k == Var::K::Int) {
    src = e_.guards.source(SrcKind::Index, t.src, key.i);
  } else if (key.k == Var::K::Table || key.k == Var::K::Closure ||
             (key.k == Var::K::Tensor && key.input < 0)) {
    return Var::nil();  // a value made in this trace is no key of a table from outside it
  } else if ((key.k == Var::K::Tensor || key.k == Var::K::Object) && key.src >= 0) {
    src = e_.guards.source(SrcKind::Keyed, t.src, key.src);  // a key read from outside
  } else {
    throw BreakSignal{BreakCode::UnsupportedBytecode,
                      "table key that is not a string or an integer"};
  }
  return read_source(src);
}

Var Tracer::metatable_of(const Var& v) {
  int msrc = e_.guards.source(SrcKind::Metatable, v.src, 0);
  Var mt = read_source(msrc);
  if (mt.k == Var::K::Nil) return mt;
  push_obj(mt.obj);
  guard_identity(msrc, -1);
  Var pm = mt;
  pm.src = pin(-1, "");
  lua_pop(L, 1);
  return pm;
}

void Tracer::note_size_read(const Var& t) {
  // A size read into Lua may flow anywhere: dynamic dims become static again (equality guards).
  if (e_.graph.dynamic_dims.empty()) return;
  e_.graph.dynamic_dims.clear();
  for (Guard& g : e_.guards.guards)
    if (g.kind == GuardKind::Tensor && g.tensor.dynamic) {
      g.tensor.dynamic = 0;
      g.expected = tensor_spec_string(g.tensor);
    }
}

// One hop of an __index or __newindex chain through a table. Long chains (loops, which Lua
// raises for after 2000 hops) break: stock Lua runs the instruction, error or not.
void Tracer::chain_hop(int step) {
  constexpr int kMaxHops = 100;
  chain_ += step;
  if (chain_ > kMaxHops)
    throw BreakSignal{BreakCode::UnsupportedBytecode, "metamethod chain of more than 100 tables"};
}

bool Tracer::index_through(const Var& h, const Var& key, Var* out, int ret_a) {
  chain_hop(1);
  const bool done = index(h, key, out, ret_a);
  chain_hop(-1);
  return done;
}

// t's __index is h: a function is called with (t, key), anything else is indexed with key.
bool Tracer::index_handler(const Var& h, const Var& t, const Var& key, Var* out, int ret_a) {
  bool fn = h.k == Var::K::Closure;
  if (h.k == Var::K::Object) {
    push_obj(h.obj);
    fn = lua_type(L, -1) == LUA_TFUNCTION;
    lua_pop(L, 1);
  }
  if (fn) return call(h, {t, key}, ret_a, 1, false);
  return index_through(h, key, out, ret_a);
}

bool Tracer::index(const Var& t, const Var& key_in, Var* out, int ret_a) {
  const Var key = normalize_key(spec(key_in));  // x[2.0] is x[2] for tensors too (lua_tointegerx)
  switch (t.k) {
    case Var::K::Tensor: {
      if (key.k == Var::K::Str) {
        // methods first (tc.Tensor), then properties, as the tensor's __index does
        lua_getfield(L, LUA_REGISTRYINDEX, "tc.module");
        lua_getfield(L, -1, "Tensor");
        lua_pushlstring(L, key.s.data(), key.s.size());
        if (lua_rawget(L, -2) != LUA_TNIL) {
          *out = from_lua_unguarded(-1);  // tc.Tensor's methods: pinned
          lua_pop(L, 3);
          return true;
        }
        lua_pop(L, 3);
        bool found = false;
        *out = tensor_property(t, key.s, &found);
        return true;
      }
      *out = tensor_index(t, key);
      return true;
    }
    case Var::K::Table: {
      ModelTable& m = tables_[t.id];
      if (key.k == Var::K::Int && key.i >= 1 && key.i <= int64_t(m.array.size())) {
        *out = m.array[key.i - 1];
        if (out->k != Var::K::Nil) return true;
      } else if (int j = model_find(m, key); j >= 0 && m.hash[j].second.k != Var::K::Nil) {
        *out = m.hash[j].second;
        return true;
      }
      if (m.is_size && key.k == Var::K::Str) {  // tc.Size methods
        if (key.s == "numel") {
          lua_getfield(L, LUA_REGISTRYINDEX, "tc.Size");
          lua_getfield(L, -1, "__index");
          lua_getfield(L, -1, "numel");
          *out = from_lua_unguarded(-1);
          lua_pop(L, 3);
          return true;
        }
      }
      if (m.metatable) {
        Var h = raw_get(*m.metatable, Var::string("__index"));
        if (h.k == Var::K::Nil) break;
        return index_handler(h, t, key, out, ret_a);
      }
      *out = Var::nil();
      return true;
    }
    case Var::K::Object: {
      const int o = push_obj(t.obj);
      const int type = lua_type(L, o);
      lua_pop(L, 1);
      if (type == LUA_TUSERDATA) {
        // other userdata (io's files ...): through its metatable's __index, as Lua does
        const Var mt = t.src < 0 ? Var::nil() : metatable_of(t);
        const Var h = mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__index"));
        if (h.k == Var::K::Nil) throw BreakSignal{BreakCode::ForeignUserdata, "indexing"};
        return index_handler(h, t, key, out, ret_a);
      }
      if (type != LUA_TTABLE)
        throw BreakSignal{BreakCode::UnsupportedBytecode,
                          std::string("indexing a ") + lua_typename(L, type) + " value"};
      Var v = raw_get(t, key);
      if (v.k != Var::K::Nil) {
        *out = v;
        return true;
      }
      // Absent: the metatable decides (its identity is guarded, so its fields are read once).
      Var mt = metatable_of(t);
      if (mt.k == Var::K::Nil) {
        *out = Var::nil();
        return true;
      }
      Var h = raw_get(mt, Var::string("__index"));
      if (h.k == Var::K::Nil) {
        *out = Var::nil();
        return true;
      }
      return index_handler(h, t, key, out, ret_a);
    }
    case Var::K::Str: {
      // ("x"):upper(): the string library through the string metatable
      if (key.k != Var::K::Str)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "indexing a string"};
      lua_getglobal(L, "string");
      if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        throw BreakSignal{BreakCode::UnsupportedBytecode, "string methods"};
      }
      lua_getfield(L, -1, key.s.c_str());
      *out = from_lua_unguarded(-1);
      lua_pop(L, 2);
      return true;
    }
    default:
      throw BreakSignal{BreakCode::UnsupportedBytecode, "indexing a value that is not a table"};
  }
  *out = Var::nil();
  return true;
}

// The array part of a table, made in the trace or read from outside (raw reads, guarded, with
// the border t[n+1] == nil), as eager indexing reads index tables with lua_rawlen/lua_rawgeti.
std::vector<Var> Tracer::array_items(const Var& t) {
  if (t.k == Var::K::Table) {
    if (!tables_[t.id].hash.empty())
      throw BreakSignal{BreakCode::UnsupportedBytecode, "tensor index table with keys"};
    return tables_[t.id].array;
  }
  push_obj(t.obj);
  const int64_t n = lua_type(L, -1) == LUA_TTABLE ? int64_t(lua_rawlen(L, -1)) : -1;
  lua_pop(L, 1);
  if (n < 0) throw BreakSignal{BreakCode::UnsupportedBytecode, "tensor index with this kind of key"};
  std::vector<Var> items;
  for (int64_t j = 1; j <= n; j++) items.push_back(raw_get(t, Var::integer(j)));
  raw_get(t, Var::integer(n + 1));
  return items;
}

// x[key] as the tensor's __index does it (lua_tensor.cpp index_get): integers select, index
// tables ({i, {a, b}, {}}) make a chain of views, an integer tensor (the key, or one item of an
// index table) gathers along its dim; a bool mask gives a data-dependent shape. With `item`, the
// index tensor of a table is not gathered but handed back (dim, index) for an assignment.
Var Tracer::tensor_index(const Var& x, const Var& key, std::pair<int64_t, Var>* item) {
  // what eager raises for (lua_tensor.cpp): runs there, at a break
  auto unsupported = [] { return BreakSignal{BreakCode::UnsupportedBytecode, "tensor index with this kind of key"}; };
  auto gather = [&](const Var& t, int64_t d, const Var& index) {
    Var flat_shape = new_table();
    tables_[flat_shape.id].array = {Var::integer(-1)};
    Shape s = e_.graph.fake(t.ref).sizes();
    const Shape& is = e_.graph.fake(index.ref).sizes();
    s.erase(s.begin() + (d - 1));
    s.insert(s.begin() + (d - 1), is.begin(), is.end());
    const Var flat = call_op(int(Op::reshape), {index, flat_shape})[0];
    const Var rows = call_op(int(Op::index_select), {t, Var::integer(d), flat})[0];
    return call_op(int(Op::view), {rows, size_table(s)})[0];
  };
  if (key.k == Var::K::Int) return call_op(int(Op::select), {x, Var::integer(1), key})[0];
  if (key.k == Var::K::Tensor) {
    const Tensor& k = e_.graph.fake(key.ref);
    if (k.dtype() == DType::Bool || k.dtype() == DType::UInt8)
      throw BreakSignal{BreakCode::DataDependentShape, "indexing with a mask"};
    if (!is_integral(k.dtype(), false) || e_.graph.fake(x.ref).dim() == 0) throw unsupported();
    return gather(x, 1, key);
  }
  if (key.k != Var::K::Table && key.k != Var::K::Object) throw unsupported();
  Var t = x;
  int64_t d = 1;  // the next dim of t to index (1-based)
  int64_t at = 0;  // the dim of the index tensor (0: none)
  Var index;
  for (const Var& it : array_items(key)) {
    if (it.k == Var::K::Int) {
      t = call_op(int(Op::select), {t, Var::integer(d), it})[0];
      continue;
    }
    if (it.k == Var::K::Tensor) {
      if (!is_integral(e_.graph.fake(it.ref).dtype(), false) || at != 0 || d > e_.graph.fake(t.ref).dim())
        throw unsupported();
      at = d++;
      index = it;
      continue;
    }
    if (it.k != Var::K::Table && it.k != Var::K::Object) throw unsupported();
    const std::vector<Var> r = array_items(it);
    if (r.size() > 3) throw BreakSignal{BreakCode::UnsupportedBytecode, "tensor index range"};
    if (r.size() == 1)
      t = call_op(int(Op::narrow), {t, Var::integer(d), r[0], Var::integer(1)})[0];
    else if (r.size() >= 2)
      t = call_op(int(Op::slice),
                  {t, Var::integer(d), r[0], r[1], r.size() == 3 ? r[2] : Var::integer(1)})[0];
    d++;
  }
  if (at == 0) return t;
  if (item) {
    *item = {at, index};
    return t;
  }
  return gather(t, at, index);
}

// x[key] = v as the tensor's __newindex does it (lua_tensor.cpp index_set): the same ops on fake
// tensors, so the write is a node of the graph (views alias the written tensor when it runs).
void Tracer::tensor_assign(const Var& x, const Var& key, const Var& v_in) {
  const Var v = spec(v_in);
  if (key.k == Var::K::Str && key.s == "grad") return set_tensor_grad(x, v);
  if (key.k == Var::K::Str)
    throw BreakSignal{BreakCode::TensorAssignment, "x." + key.s + " = ... (tensor metadata)"};
  if (v.k != Var::K::Tensor && !v.is_number() && v.k != Var::K::Bool)
    throw BreakSignal{BreakCode::TensorAssignment, "a value that is not a number or a tensor"};
  const Op write = v.k == Var::K::Tensor ? Op::copy_ : Op::fill_;
  // t[.., index, ..] = v along dim d (lua_tensor.cpp scatter_dim): the gathered slices, detached,
  // take v; then they are scattered back
  auto scatter_into = [&](const Var& t, int64_t d, const Var& index) {
    const Shape ts = e_.graph.fake(t.ref).sizes();
    const Shape is = e_.graph.fake(index.ref).sizes();
    int64_t n = 1;
    for (int64_t s : is) n *= s;
    Shape gathered = ts, flat = ts, ones(ts.size(), 1);
    gathered.erase(gathered.begin() + (d - 1));
    gathered.insert(gathered.begin() + (d - 1), is.begin(), is.end());
    flat[d - 1] = ones[d - 1] = n;
    Var flat_shape = new_table();
    tables_[flat_shape.id].array = {Var::integer(-1)};
    const Var rows = call_op(int(Op::index_select),
                             {t, Var::integer(d), call_op(int(Op::reshape), {index, flat_shape})[0]})[0];
    const Var src = call_op(int(Op::detach), {rows})[0];
    call_op(int(write), {call_op(int(Op::view), {src, size_table(gathered)})[0], v});
    const Var idx = call_op(int(Op::expand), {call_op(int(Op::reshape), {index, size_table(ones)})[0], size_table(flat)})[0];
    call_op(int(Op::copy_), {t, call_op(int(Op::scatter), {t, Var::integer(d), idx, src})[0]});
  };
  if (key.k == Var::K::Tensor) {
    const DType dt = e_.graph.fake(key.ref).dtype();
    if (dt != DType::Bool && dt != DType::UInt8) {
      if (!is_integral(dt, false) || e_.graph.fake(x.ref).dim() == 0)
        throw BreakSignal{BreakCode::TensorAssignment, "assignment through a tensor that is not an index"};
      return scatter_into(x, 1, key);
    }
    const Var r = v.k == Var::K::Tensor ? call_op(int(Op::where), {key, v, x})[0]
                                        : call_op(int(Op::masked_fill), {x, key, v})[0];
    call_op(int(Op::copy_), {x, r});
    return;
  }
  std::pair<int64_t, Var> item{0, Var()};
  const Var target = tensor_index(x, key, &item);  // a view of x
  if (item.first != 0) return scatter_into(target, item.first, item.second);
  call_op(int(write), {target, v});
}

// A write Lua sends to __newindex (the key is absent from t and its metatable has one): a
// function is called (inlined: its rawsets become recorded writes), anything else is written
// through to, as luaV_finishset does.
void Tracer::write_through(const Var& h, const Var& t, const Var& key, const Var& v) {
  bool fn = h.k == Var::K::Closure;
  if (h.k == Var::K::Object) {
    push_obj(h.obj);
    fn = lua_type(L, -1) == LUA_TFUNCTION;
    lua_pop(L, 1);
  }
  if (fn) {
    call(h, {t, key, v}, 0, 0, false);  // no results: nothing is written in the caller's frame
    return;
  }
  chain_hop(1);
  newindex(h, key, v);
  chain_hop(-1);
}

void Tracer::newindex(const Var& t, const Var& key_in, const Var& v) {
  const Var key = normalize_key(spec(key_in));
  if (t.k == Var::K::Tensor) return tensor_assign(t, key, v);
  if (key.k == Var::K::Float && key.f != key.f)
    throw BreakSignal{BreakCode::ErrorCall, "table index is NaN"};
  switch (t.k) {
    case Var::K::Table: {
      ModelTable& m = tables_[t.id];
      if (m.metatable && raw_get(t, key).k == Var::K::Nil) {
        const Var h = raw_get(*m.metatable, Var::string("__newindex"));
        if (h.k != Var::K::Nil) return write_through(h, t, key, v);
      }
      // A closure may live in a table made in the trace; it escapes only if that table does.
      m.log.push_back({key, v.k != Var::K::Nil});
      if (key.k == Var::K::Nil) throw BreakSignal{BreakCode::UnsupportedBytecode, "nil table key"};
      if (key.k == Var::K::Int && key.i >= 1 && key.i <= int64_t(m.array.size()) + 1) {
        if (key.i == int64_t(m.array.size()) + 1) {
          if (v.k == Var::K::Nil) return;
          m.array.push_back(v);
          // pull following integer keys out of the hash part
          for (int j; (j = model_find(m, Var::integer(int64_t(m.array.size()) + 1))) >= 0;) {
            m.array.push_back(m.hash[j].second);
            m.hash.erase(m.hash.begin() + j);
          }
        } else {
          m.array[key.i - 1] = v;
          if (v.k == Var::K::Nil && key.i == int64_t(m.array.size())) m.array.pop_back();
        }
        return;
      }
      if (!key.is_const() && key.k != Var::K::Object)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "table key kind"};
      if (int j = model_find(m, key); j >= 0)
        m.hash[j].second = v;
      else
        m.hash.push_back({key, v});
      return;
    }
    case Var::K::Object: {
      const int o = push_obj(t.obj);
      if (lua_type(L, o) != LUA_TTABLE) {
        lua_pop(L, 1);
        throw BreakSignal{lua_type(L, o) == LUA_TUSERDATA ? BreakCode::ForeignUserdata
                                                          : BreakCode::UnsupportedBytecode,
                          "assignment into a value that is not a table"};
      }
      lua_pop(L, 1);
      if (raw_get(t, key).k == Var::K::Nil) {
        // A new key: __newindex decides (the metatable's identity and field are guarded).
        const Var mt = metatable_of(t);
        const Var h = mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__newindex"));
        if (h.k != Var::K::Nil) return write_through(h, t, key, v);
      }
      const std::string ks = key_string(key);
      if (ks.empty() || (key.k != Var::K::Str && key.k != Var::K::Int))
        throw BreakSignal{BreakCode::UnsupportedBytecode,
                          "table key that is not a string or an integer"};
      overlay_[{t.obj, ks}] = v;
      effects_.push_back({Effect::Kind::RawSet, t, key, v, 0});
      return;
    }
    default:
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        "assignment into a value that is not a table"};
  }
}

// ---- arithmetic ------------------------------------------------------------------------------
bool Tracer::arith(int op, const Var& a, const Var& b, Var* out, int ret_a) {
  // an unspecialized number stays one only as an operand of a tensor op (a graph input)
  if ((a.unspec || b.unspec) && a.k != Var::K::Tensor && b.k != Var::K::Tensor)
    return arith(op, spec(a), spec(b), out, ret_a);
  if (a.is_number() && b.is_number()) {
    // Cases where Lua raises: integer division/modulo by zero, bitwise on non-integral floats.
    const bool bitwise = (op >= LUA_OPBAND && op <= LUA_OPSHR) || op == LUA_OPBNOT;
    if ((op == LUA_OPIDIV || op == LUA_OPMOD) && a.k == Var::K::Int && b.k == Var::K::Int &&
        b.i == 0)
      throw BreakSignal{BreakCode::UnsupportedBytecode, "integer division by zero"};
    if (bitwise) {
      for (const Var* v : {&a, &b})
        if (v->k == Var::K::Float && (std::floor(v->f) != v->f || std::fabs(v->f) >= 9.2e18))
          throw BreakSignal{BreakCode::UnsupportedBytecode, "bitwise operation on a float"};
    }
    push_var(a);
    if (op != LUA_OPUNM && op != LUA_OPBNOT) push_var(b);
    lua_arith(L, op);
    *out = from_lua_unguarded(-1);
    lua_pop(L, 1);
    return true;
  }
  const bool ta = a.k == Var::K::Tensor, tb = b.k == Var::K::Tensor;
  if ((ta && (tb || b.is_number() || b.unspec || b.k == Var::K::Bool)) ||
      (tb && (a.is_number() || a.unspec || a.k == Var::K::Bool))) {
    switch (op) {
      case LUA_OPADD:
        *out = call_op(int(Op::add), {a, b})[0];
        return true;
      case LUA_OPSUB:
        *out = call_op(int(Op::sub), {a, b})[0];
        return true;
      case LUA_OPMUL:
        *out = call_op(int(Op::mul), {a, b})[0];
        return true;
      case LUA_OPDIV:
        *out = call_op(int(Op::div), {a, b})[0];
        return true;
      case LUA_OPMOD:
        *out = call_op(int(Op::remainder), {a, b})[0];
        return true;
      case LUA_OPPOW:
        *out = call_op(int(Op::pow), {a, b})[0];
        return true;
      case LUA_OPIDIV: {
        Var opts = new_table();
        tables_[opts.id].hash.push_back({Var::string("rounding_mode"), Var::string("floor")});
        *out = call_op(int(Op::div), {a, b, opts})[0];
        return true;
      }
      case LUA_OPBAND:
        *out = call_op(int(Op::bitwise_and), {a, b})[0];
        return true;
      case LUA_OPBOR:
        *out = call_op(int(Op::bitwise_or), {a, b})[0];
        return true;
      case LUA_OPBXOR:
        *out = call_op(int(Op::bitwise_xor), {a, b})[0];
        return true;
      case LUA_OPUNM:
        *out = call_op(int(Op::neg), {a})[0];
        return true;
      case LUA_OPBNOT:
        *out = call_op(int(Op::bitwise_not), {a})[0];
        return true;
      default:
        throw BreakSignal{BreakCode::UnsupportedBytecode, "shift on a tensor"};
    }
  }
  // Lua classes: the metamethod of the first operand that has one.
  for (const Var* v : {&a, &b}) {
    if (v->k != Var::K::Object && !(v->k == Var::K::Table && tables_[v->id].metatable)) continue;
    Var mm;
    if (v->k == Var::K::Object) {
      push_obj(v->obj);
      bool table = lua_type(L, -1) == LUA_TTABLE;
      lua_pop(L, 1);
      if (!table) continue;
      Var mt = metatable_of(*v);
      if (mt.k == Var::K::Nil) continue;
      mm = raw_get(mt, Var::string(kArithEvents[op]));
    } else {
      mm = raw_get(*tables_[v->id].metatable, Var::string(kArithEvents[op]));
    }
    if (mm.k == Var::K::Nil) continue;
    std::vector<Var> args{a, b};
    return call(mm, std::move(args), ret_a, 1, false);
  }
  if (a.k == Var::K::Str || b.k == Var::K::Str)
    throw BreakSignal{BreakCode::UnsupportedBytecode, "arithmetic on a string"};
  throw BreakSignal{BreakCode::UnsupportedBytecode, "arithmetic on values tc does not model"};
}

// ---- comparisons -------------------------------------------------------------------------------
// Whether v is a table whose metatable has __eq (a table made in the trace, or a real one: guarded).
bool Tracer::has_eq_event(const Var& v) {
  Var mt;
  if (v.k == Var::K::Table) {
    if (tables_[v.id].is_size || !tables_[v.id].metatable) return false;
    mt = *tables_[v.id].metatable;
  } else {
    push_obj(v.obj);
    const bool table = lua_type(L, -1) == LUA_TTABLE;
    lua_pop(L, 1);
    if (!table) return false;
    mt = metatable_of(v);
    if (mt.k == Var::K::Nil) return false;
  }
  return raw_get(mt, Var::string("__eq")).k != Var::K::Nil;
}

bool Tracer::compare(OpCode op, const Var& a_in, const Var& b_in) {
  const Var a = spec(a_in), b = spec(b_in);
  static const char* names[] = {"==", "<", "<="};
  const int which = op == OpCode::EQ ? 0 : op == OpCode::LT ? 1 : 2;
  if (a.k == Var::K::Tensor || b.k == Var::K::Tensor) {
    if (op == OpCode::EQ && a.k != b.k && !(a.k == Var::K::Object || b.k == Var::K::Object))
      return false;
    throw BreakSignal{BreakCode::DataDependentBranch,
                      std::string("`") + names[which] + "` on a tensor value"};
  }
  if ((a.is_number() && b.is_number()) || (a.k == Var::K::Str && b.k == Var::K::Str)) {
    push_var(a);
    push_var(b);
    bool r = lua_compare(L, -2, -1, which == 0 ? LUA_OPEQ : which == 1 ? LUA_OPLT : LUA_OPLE);
    lua_pop(L, 2);
    return r;
  }
  if (op != OpCode::EQ)
    throw BreakSignal{BreakCode::UnsupportedBytecode,
                      std::string("`") + names[which] + "` on values tc does not model"};
  if (a.k == Var::K::Table && b.k == Var::K::Table && tables_[a.id].is_size &&
      tables_[b.id].is_size) {
    const auto &x = tables_[a.id].array, &y = tables_[b.id].array;
    if (x.size() != y.size()) return false;
    for (size_t j = 0; j < x.size(); j++)
      if (!same_const(x[j], y[j])) return false;
    return true;
  }
  if (a.k == Var::K::Object && b.k == Var::K::Object) {
    push_obj(a.obj);
    push_obj(b.obj);
    bool same = lua_rawequal(L, -1, -2);
    bool tables = lua_type(L, -1) == LUA_TTABLE && lua_type(L, -2) == LUA_TTABLE;
    lua_pop(L, 2);
    guard_identity(a, b, same);
    if (same) return true;
    if (!tables) return false;
    // different tables are equal only through __eq (looked up in either metatable, guarded)
    if (has_eq_event(a) || has_eq_event(b))
      throw BreakSignal{BreakCode::UnsupportedBytecode, "`==` through __eq"};
    return false;
  }
  if ((a.k == Var::K::Table && (b.k == Var::K::Table || b.k == Var::K::Object)) ||
      (b.k == Var::K::Table && a.k == Var::K::Object)) {
    // a table made in the trace: another table only through __eq (its metatable's too)
    if (a.k == Var::K::Table && b.k == Var::K::Table && a.id == b.id) return true;
    if (has_eq_event(a) || has_eq_event(b))
      throw BreakSignal{BreakCode::UnsupportedBytecode, "`==` through __eq"};
    return false;
  }
  return same_const(a, b);
}

// An identity test of two real values (`==`, rawequal) holds for later calls only while their
// sources are (not) the same object: guarded as guard_aliasing guards written tables.
void Tracer::guard_identity(const Var& a, const Var& b, bool same) {
  if (a.src < 0 || b.src < 0)
    throw BreakSignal{BreakCode::UnsupportedBytecode, "identity test of a value without a source"};
  if (a.src == b.src) return;
  if (!e_.guards.first_same_as(a.src, b.src)) return;
  Guard g{GuardKind::SameAs, a.src};
  g.k = b.src;
  g.bval = same;  // (its expected text is made when printed: expected_of)
  e_.guards.guards.push_back(g);
}

Var Tracer::len(const Var& v) {
  switch (v.k) {
    case Var::K::Str:
      return Var::integer(int64_t(v.s.size()));
    case Var::K::Tensor: {
      const Tensor& t = e_.graph.fake(v.ref);
      if (t.dim() == 0) throw BreakSignal{BreakCode::UnsupportedBytecode, "# of a 0-dim tensor"};
      note_size_read(v);
      return Var::integer(t.sizes()[0]);
    }
    case Var::K::Table:
      if (tables_[v.id].metatable &&
          raw_get(*tables_[v.id].metatable, Var::string("__len")).k != Var::K::Nil)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "# through __len"};
      {
        // Without holes the border is the array's end; with holes Lua's answer depends on the
        // table's layout ({1, nil, 3} is 3): a replay of its construction gives it
        const ModelTable& m = tables_[v.id];
        bool holes = false;
        for (const Var& x : m.array) holes = holes || x.k == Var::K::Nil;
        for (auto& [k, x] : m.hash) holes = holes || (k.k == Var::K::Int && x.k != Var::K::Nil);
        if (!holes) return Var::integer(int64_t(m.array.size()));
        const int rt = replayed(v.id);
        const Var n = Var::integer(int64_t(lua_rawlen(L, rt)));
        lua_pop(L, 1);
        return n;
      }
    case Var::K::Object: {
      push_obj(v.obj);
      if (lua_type(L, -1) != LUA_TTABLE) {
        lua_pop(L, 1);
        throw BreakSignal{BreakCode::UnsupportedBytecode, "# of a value that is not a table"};
      }
      lua_pop(L, 1);
      Var mt = metatable_of(v);
      if (mt.k != Var::K::Nil && raw_get(mt, Var::string("__len")).k != Var::K::Nil)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "# through __len"};
      // Guard the border: t[n] present (when n > 0) and t[n+1] absent, as this trace's writes
      // left them (raw_get sees them: t[#t + 1] = v twice appends twice).
      push_obj(v.obj);
      int64_t n = int64_t(lua_rawlen(L, -1));
      lua_pop(L, 1);
      while (n > 0 && raw_get(v, Var::integer(n)).k == Var::K::Nil) n--;
      while (raw_get(v, Var::integer(n + 1)).k != Var::K::Nil) n++;
      return Var::integer(n);
    }
    default:
      throw BreakSignal{BreakCode::UnsupportedBytecode, "# of this value"};
  }
}

Var Tracer::concat(const std::vector<Var>& parts_in) {
  std::vector<Var> parts;
  for (const Var& p : parts_in) parts.push_back(spec(p));
  for (const Var& p : parts) {
    if (p.k == Var::K::Tensor) throw BreakSignal{BreakCode::ReadsTensorValue, "`..` on a tensor"};
    if (!(p.is_number() || p.k == Var::K::Str))
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        "`..` on values that are not strings or numbers"};
  }
  for (const Var& p : parts) push_var(p);
  lua_concat(L, int(parts.size()));
  Var out = from_lua_unguarded(-1);
  lua_pop(L, 1);
  return out;
}

}  // namespace tc::capture
