// Tracer calls: inlined Lua functions, tc ops recorded as graph nodes on fake tensors, tensor
// properties and methods, and the modelled builtins (pure on constants, or exact models).
#include <cstring>

#include "capture_state.h"
#include "lua_binding.h"
#include "tracer.h"

namespace tc::capture {

namespace {
bool is_pure_builtin(const std::string& n) {
  if (n.rfind("math.", 0) == 0) return n != "math.random" && n != "math.randomseed";
  if (n.rfind("string.", 0) == 0) return n != "string.gmatch" && n != "string.dump";
  return n == "tostring" || n == "tonumber";
}
}  // namespace

bool Tracer::call(const Var& fn, std::vector<Var> args, int ret_a, int ret_n, bool tail) {
  if (fn.k == Var::K::Closure) {
    push_frame(fn, closures_[fn.id].p, std::move(args), ret_a, ret_n);
    return false;
  }
  if (fn.k != Var::K::Object) {
    if (fn.k == Var::K::Table && tables_[fn.id].metatable) {
      Var mm = raw_get(*tables_[fn.id].metatable, Var::string("__call"));
      if (mm.k != Var::K::Nil) {
        args.insert(args.begin(), fn);
        return call(mm, std::move(args), ret_a, ret_n, tail);
      }
    }
    throw BreakSignal{BreakCode::UnsupportedBytecode, "call of a value that is not a function"};
  }
  const int o = push_obj(fn.obj);
  const int type = lua_type(L, o);
  if (type == LUA_TTABLE || type == LUA_TUSERDATA) {
    lua_pop(L, 1);
    if (type == LUA_TUSERDATA && lua::to_tensor(L, o))
      throw BreakSignal{BreakCode::UnsupportedBytecode, "call of a tensor"};
    Var mt = metatable_of(fn);
    Var mm = mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__call"));
    if (mm.k == Var::K::Nil)
      throw BreakSignal{BreakCode::UnsupportedBytecode, "call of a table without __call"};
    args.insert(args.begin(), fn);
    return call(mm, std::move(args), ret_a, ret_n, tail);
  }
  if (type != LUA_TFUNCTION) {
    lua_pop(L, 1);
    throw BreakSignal{BreakCode::UnsupportedBytecode,
                      std::string("call of a ") + lua_typename(L, type) + " value"};
  }
  // Functions registered with tc.compiler.allow_in_graph: one External node of the graph.
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.allowed");
  lua_pushvalue(L, o);
  if (lua_istable(L, -2) && lua_rawget(L, -2) == LUA_TTABLE) {
    guard_identity(fn.src, o);
    std::vector<Var> out = call_external(o, lua_gettop(L), fn, args);
    lua_settop(L, o - 1);
    assign(ret_a, ret_n, out);
    return true;
  }
  lua_pop(L, 2);
  // Functions marked with tc.compiler.disable, and wrappers made by tc.compile (traced through).
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.disabled");
  lua_pushvalue(L, o);
  bool disabled = lua_istable(L, -2) && lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);  // the table (or nil) and the value (or the key)
  if (disabled) {
    lua_pop(L, 1);
    throw BreakSignal{BreakCode::DisabledFunction, e_.guards.describe(fn.src)};
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.wrappers");
  if (lua_istable(L, -1)) {
    lua_pushvalue(L, o);
    if (lua_rawget(L, -2) == LUA_TFUNCTION) {
      // a compiled function called from compiled code: trace the original (wrapper pinned)
      int wsrc = pin(o, "");
      guard_identity(fn.src, o);
      (void)wsrc;
      Var inner = from_lua_unguarded(-1);
      lua_pop(L, 3);
      return call(inner, std::move(args), ret_a, ret_n, tail);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (!lua_iscfunction(L, o)) {
    // A Lua function: its identity is guarded, then its body is inlined.
    guard_identity(fn.src, o);
    Var pinned = fn;
    pinned.src = pin(o, "");
    const void* ptr = lua_topointer(L, o);
    auto memo = proto_memo_.find(ptr);
    const vm::Proto* p =
        memo != proto_memo_.end() ? memo->second : (proto_memo_[ptr] = proto_of(L, o, nullptr));
    lua_pop(L, 1);
    push_frame(pinned, p, std::move(args), ret_a, ret_n);
    return false;
  }
  if (const std::optional<Op> op = lua::op_of(L, o)) {
    guard_identity(fn.src, o);
    lua_pop(L, 1);
    assign(ret_a, ret_n, call_op(int(*op), args));
    return true;
  }
  if (lua::trampoline_target(L, o)) {
    // tc's Lua-side functions sit behind a C trampoline; trace the Lua function inside
    guard_identity(fn.src, o);
    Var inner = from_lua_unguarded(-1);
    lua_pop(L, 2);
    return call(inner, std::move(args), ret_a, ret_n, tail);
  }
  const lua_CFunction cf = lua_tocfunction(L, o);
  const Known& kn = known();
  auto it = kn.builtins.find(cf);
  if (it != kn.builtins.end()) {
    guard_identity(fn.src, o);
    lua_pop(L, 1);
    std::vector<Var> out;
    if (call_builtin(it->second, fn, args, &out)) {
      assign(ret_a, ret_n, out);
      return true;
    }
    return false;  // a frame was pushed
  }
  lua_pop(L, 1);
  if (auto b = kn.backwards.find(cf); b != kn.backwards.end())
    throw BreakSignal{BreakCode::Backward, b->second};
  throw BreakSignal{BreakCode::UnknownCFunction, e_.guards.describe(fn.src)};
}

// ---- tensor ops --------------------------------------------------------------------------------
Value Tracer::to_value(const Var& v_in, bool* ok) {
  *ok = true;
  const Var v = spec(v_in);  // call_op passes unspecialized numbers as graph inputs before this
  switch (v.k) {
    case Var::K::Nil:
      return Value();
    case Var::K::Bool:
      return Value(v.b);
    case Var::K::Int:
      return Value(v.i);
    case Var::K::Float:
      return Value(v.f);
    case Var::K::Str:
      return Value(v.s);
    case Var::K::Tensor:
      return Value(e_.graph.fake(v.ref));
    case Var::K::Table: {
      const ModelTable& m = tables_[v.id];
      if (!m.hash.empty()) break;
      if (m.array.empty()) return Value(TensorList{});
      IntList ints;
      FloatList floats;
      TensorList tensors;
      bool all_int = true, all_num = true, all_tensor = true;
      for (const Var& x0 : m.array) {
        const Var x = spec(x0);
        all_int &= x.k == Var::K::Int;
        all_num &= x.is_number();
        all_tensor &= x.k == Var::K::Tensor;
        if (x.k == Var::K::Int) ints.push_back(x.i);
        if (x.is_number()) floats.push_back(x.num());
        if (x.k == Var::K::Tensor) tensors.push_back(e_.graph.fake(x.ref));
      }
      if (all_int) return Value(ints);
      if (all_num) return Value(floats);
      if (all_tensor) return Value(tensors);
      break;
    }
    case Var::K::Object: {
      const int o = push_obj(v.obj);
      DType dt;
      if (lua_type(L, o) == LUA_TTABLE && lua::to_dtype(L, o, &dt)) {
        // dtype objects are fixed tables of tc: identity guarded
        guard_identity(v.src, o);
        lua_pop(L, 1);
        return Value(dt);
      }
      if (lua_type(L, o) == LUA_TTABLE && !lua_getmetatable(L, o)) {
        // a real array of numbers: every element read (and guarded) through its source
        lua_pop(L, 1);
        IntList ints;
        FloatList floats;
        bool all_int = true;
        const std::vector<Var> items = array_items(v);
        for (const Var& x0 : items) {
          const Var x = spec(x0);
          if (!x.is_number()) {
            *ok = false;
            return Value();
          }
          all_int &= x.k == Var::K::Int;
          if (x.k == Var::K::Int) ints.push_back(x.i);
          floats.push_back(x.num());
        }
        if (items.empty()) return Value(TensorList{});
        return all_int ? Value(ints) : Value(floats);
      }
      lua_settop(L, o - 1);
      break;
    }
    default:
      break;
  }
  *ok = false;
  return Value();
}

std::vector<Var> Tracer::call_op(int op_id, const std::vector<Var>& in) {
  const Op op = Op(op_id);
  const OpSchema& s = schema(op);
  std::vector<Var> args = in;
  std::vector<std::pair<std::string, Var>> kw_vars;  // an options table's entries
  if (!args.empty() && args.back().k == Var::K::Table) {
    const ModelTable& m = tables_[args.back().id];
    bool options = !m.metatable && !m.is_size;
    bool any_string = false;
    for (auto& [k, _] : m.hash) any_string |= k.k == Var::K::Str;
    if (options && any_string) {
      for (auto& [k, val] : m.hash) {
        if (k.k != Var::K::Str)
          throw BreakSignal{BreakCode::OpFailedWhileTracing,
                            std::string(s.name) + ": options table with a non-string key"};
        kw_vars.emplace_back(k.s, val);
      }
      args.pop_back();
    }
  }
  if (s.kind == OpKind::DataDependent) throw BreakSignal{BreakCode::DataDependentShape, s.name};
  // Unspecialized numbers, positional or options, go in as graph inputs (0-dim wrapped numbers,
  // as the binder makes of numbers) where the op takes a tensor (or a 0-dim tensor for a number:
  // an optimizer step's lr); where it does not, they are specialized.
  bool unspec_args = false, unspec_options = false;
  for (const Var& a : args) unspec_args |= a.unspec;
  for (const auto& [k, v] : kw_vars) unspec_options |= v.unspec;
  Stack bound;
  Metas metas;
  // tries: numbers as inputs everywhere, then in the positional arguments only, then nowhere
  for (int attempt = unspec_options ? 0 : unspec_args ? 1 : 2; attempt <= 2; attempt++) {
    if (attempt == 1 && !unspec_args) continue;
    Stack pos;
    std::vector<std::pair<std::string, Value>> kw;
    for (const Var& a : args) {
      bool ok;
      pos.push_back(to_value(a.unspec && attempt <= 1 ? number_input(a) : a, &ok));
      if (!ok)
        throw BreakSignal{BreakCode::UnsupportedBytecode,
                          std::string(s.name) + ": an argument tc cannot pass to an op"};
    }
    for (const auto& [k, v] : kw_vars) {
      bool ok;
      Value x = to_value(v.unspec && attempt == 0 ? number_input(v) : v, &ok);
      if (!ok)
        throw BreakSignal{BreakCode::UnsupportedBytecode, std::string(s.name) + ": option '" + k + "'"};
      kw.emplace_back(k, std::move(x));
    }
    try {
      bound = bind(op, std::move(pos), kw);
      metas = infer_meta(op, bound);
      break;
    } catch (const Error& err) {
      if (attempt < 2) continue;
      throw BreakSignal{BreakCode::OpFailedWhileTracing, std::string(s.name) + ": " + err.what()};
    }
  }
  std::vector<NodeArg> nargs;
  for (const Value& v : bound) {
    if (v.is_tensor()) {
      auto it = proxies_.find(v.tensor().impl());
      nargs.push_back(it != proxies_.end() ? NodeArg::ref(it->second) : NodeArg::constant_of(v));
    } else if (v.is_tensor_list()) {
      std::vector<Ref> refs;
      for (const Tensor& t : v.tensors()) {
        auto it = proxies_.find(t.impl());
        if (it == proxies_.end())
          throw BreakSignal{BreakCode::UnsupportedBytecode, "tensor list with a constant tensor"};
        refs.push_back(it->second);
      }
      nargs.push_back(NodeArg::list(std::move(refs)));
    } else {
      nargs.push_back(NodeArg::constant_of(v));
    }
  }
  Stack fakes;
  TensorList list;
  for (const TensorMeta& m : metas) {
    Tensor f = Tensor::fake(m.sizes, m.strides, m.dtype, m.device);
    f.impl()->offset = m.offset;
    if (s.returns == ReturnKind::List)
      list.push_back(f);
    else
      fakes.push_back(f);
  }
  if (s.returns == ReturnKind::List) fakes.push_back(Value(list));
  std::string file;
  const int line = user_line(&file);
  std::vector<Ref> refs = e_.graph.add_op(op, std::move(nargs), std::move(fakes), line);
  e_.graph.nodes.back().file = file;
  e_.graph.nodes.back().no_grad = !lua::grad_enabled();
  std::vector<Var> out;
  for (Ref r : refs) {
    Var v;
    v.k = Var::K::Tensor;
    v.ref = r;
    proxies_[e_.graph.fake(r).impl()] = r;
    out.push_back(v);
  }
  if (!s.args.empty() && s.args[0].mutated && !in.empty() && in[0].k == Var::K::Tensor)
    out[0] = in[0];
  if (s.returns == ReturnKind::List) {
    Var t = new_table();
    tables_[t.id].array = out;
    return {t};
  }
  return out;
}

std::vector<Var> Tracer::call_external(int o, int rec, const Var& fn, const std::vector<Var>& in) {
  const std::string name = e_.guards.describe(fn.src);
  std::vector<NodeArg> nargs;
  Stack fake_args;
  Device dev;
  bool have_dev = false;
  for (size_t i = 0; i < in.size(); i++) {
    bool ok;
    Value v = to_value(in[i], &ok);
    if (!ok)
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        name + " (allow_in_graph): argument " + std::to_string(i + 1) +
                            " is not a tensor, number, string, boolean, dtype or list of them"};
    if (v.is_tensor()) {
      auto it = proxies_.find(v.tensor().impl());
      nargs.push_back(it != proxies_.end() ? NodeArg::ref(it->second) : NodeArg::constant_of(v));
      if (!have_dev) dev = v.tensor().device(), have_dev = true;
    } else if (v.is_tensor_list()) {
      std::vector<Ref> refs;
      for (const Tensor& t : v.tensors()) {
        auto it = proxies_.find(t.impl());
        if (it == proxies_.end())
          throw BreakSignal{BreakCode::UnsupportedBytecode, "tensor list with a constant tensor"};
        refs.push_back(it->second);
      }
      nargs.push_back(NodeArg::list(std::move(refs)));
    } else {
      nargs.push_back(NodeArg::constant_of(v));
    }
    fake_args.push_back(std::move(v));
  }
  // The meta function (the function itself when none was given) on fake tensors.
  const int top = lua_gettop(L);
  lua_getfield(L, rec, "meta");
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    lua_pushvalue(L, o);
  }
  lua_getfield(L, rec, "id");
  const int id = int(lua_tointeger(L, -1));
  lua_pop(L, 1);
  lua_checkstack(L, int(fake_args.size()) + 8);
  for (const Value& v : fake_args) lua::push_value(L, v);
  if (lua_pcall(L, int(fake_args.size()), LUA_MULTRET, 0) != LUA_OK) {
    std::string msg = error_text(L, -1);
    lua_settop(L, top);
    throw BreakSignal{BreakCode::OpFailedWhileTracing,
                      name + " (allow_in_graph meta function): " + msg};
  }
  Stack fakes;
  std::string bad;
  for (int i = top + 1; i <= lua_gettop(L) && bad.empty(); i++) {
    Shape sizes;
    DType dt = default_dtype();
    Device d = have_dev ? dev : Device{};
    if (const Tensor* t = lua::to_tensor(L, i)) {
      sizes = t->sizes();
      dt = t->dtype();
      d = t->device();
    } else if (lua_type(L, i) == LUA_TTABLE) {
      lua_pushstring(L, "shape");
      lua_rawget(L, i);
      try {
        Value sv = lua::to_value(L, -1, "shape");
        if (sv.is_int_list())
          sizes = sv.ints();
        else if (!(sv.is_tensor_list() && sv.tensors().empty()))
          bad = "shape is not a list of integers";
      } catch (const Error& err) {
        bad = err.what();
      }
      lua_pop(L, 1);
      lua_pushstring(L, "dtype");
      lua_rawget(L, i);
      if (!lua_isnil(L, -1) && !lua::to_dtype(L, -1, &dt)) bad = "dtype is not a dtype";
      lua_pop(L, 1);
    } else {
      bad = std::string("result ") + std::to_string(i - top) + " is a " + luaL_typename(L, i);
    }
    if (bad.empty()) fakes.push_back(Tensor::fake(sizes, contiguous_strides(sizes), dt, d));
  }
  lua_settop(L, top);
  if (!bad.empty())
    throw BreakSignal{BreakCode::OpFailedWhileTracing,
                      name + " (allow_in_graph meta function): " + bad +
                          " (return fake tensors or {shape=, dtype=} tables)"};
  auto ext = std::make_shared<ExternalFn>();
  ext->name = name;
  ext->call = [id, name, expect = fakes](const Stack& args) {
    return run_external(id, name, expect, args);
  };
  std::string file;
  const int line = user_line(&file);
  std::vector<Ref> refs = e_.graph.add_external(std::move(ext), std::move(nargs), std::move(fakes), line);
  e_.graph.nodes.back().file = file;
  std::vector<Var> out;
  for (Ref r : refs) {
    Var v;
    v.k = Var::K::Tensor;
    v.ref = r;
    proxies_[e_.graph.fake(r).impl()] = r;
    out.push_back(v);
  }
  return out;
}

Var Tracer::tensor_property(const Var& t, const std::string& key, bool* found) {
  const Tensor& x = e_.graph.fake(t.ref);
  *found = true;
  if (key == "shape") {
    note_size_read(t);
    return size_table(x.sizes());
  }
  if (key == "dtype") {
    lua::push_dtype(L, x.dtype());
    Var v = from_lua_unguarded(-1);
    lua_pop(L, 1);
    return v;
  }
  if (key == "device") return Var::string(x.device().str());
  if (key == "requires_grad") return Var::boolean(x.requires_grad());
  if (key == "ndim") return Var::integer(x.dim());
  if (key == "is_leaf") return Var::boolean(true);
  if (key == "T") {
    Var dims = new_table();
    for (int64_t d = x.dim(); d >= 1; d--) tables_[dims.id].array.push_back(Var::integer(d));
    return call_op(int(Op::permute), {t, dims})[0];
  }
  if (key == "mT" && x.dim() >= 2) return call_op(int(Op::transpose), {t, Var::integer(-2), Var::integer(-1)})[0];
  if (key == "mT") throw BreakSignal{BreakCode::OpFailedWhileTracing, "x.mT of a tensor with fewer than 2 dims"};  // eager raises
  if (key == "data") return call_op(int(Op::detach), {t})[0];
  if (key == "grad") return tensor_grad(t);
  *found = false;
  return Var::nil();
}

Var Tracer::close_handler(const Var& v) {
  if (v.k == Var::K::Table)
    return tables_[v.id].metatable ? raw_get(*tables_[v.id].metatable, Var::string("__close")) : Var::nil();
  if (v.k != Var::K::Object || v.src < 0) return Var::nil();
  const Var mt = metatable_of(v);
  return mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__close"));
}

bool Tracer::close_tbc(Frame& f, int from) {
  while (!f.tbc.empty() && f.tbc.back().closing) f.tbc.pop_back();  // its __close returned
  if (f.tbc.empty() || f.tbc.back().reg < from) return false;
  f.tbc.back().closing = true;
  const Var v = reg(f, f.tbc.back().reg);
  f.pc = f.cur;  // before the call: pushing a frame may move f
  call(close_handler(v), {v, Var::nil()}, 0, 0, false);
  return true;
}

const TensorImpl* Tracer::real_tensor(const Var& x) {
  if (x.k != Var::K::Tensor || x.input < 0 || x.src < 0) return nullptr;
  push_source(x.src);
  const Tensor* t = lua::to_tensor(L, -1);
  const TensorImpl* impl = t ? t->impl() : nullptr;
  lua_pop(L, 1);  // the tensor stays alive in its table, which the trace keeps
  return impl;
}

Var Tracer::tensor_grad(const Var& x) {
  const TensorImpl* real = real_tensor(x);
  if (!real) throw BreakSignal{BreakCode::UnsupportedBytecode, "x.grad of a tensor made in the compiled code"};
  if (auto it = grad_overlay_.find(real); it != grad_overlay_.end()) return it->second;
  return read_source(e_.guards.source(SrcKind::Grad, x.src, 0));
}

void Tracer::set_tensor_grad(const Var& x, const Var& v) {
  const TensorImpl* real = real_tensor(x);
  if (!real) throw BreakSignal{BreakCode::TensorAssignment, "x.grad = ... on a tensor made in the compiled code"};
  if (v.k != Var::K::Nil) {
    // eager checks shape and dtype (lua_tensor.cpp); a value that fails them runs there
    if (v.k != Var::K::Tensor) throw BreakSignal{BreakCode::TensorAssignment, "x.grad = a value that is not a tensor"};
    const Tensor& g = e_.graph.fake(v.ref);
    const Tensor& t = e_.graph.fake(x.ref);
    if (g.sizes() != t.sizes() || g.dtype() != t.dtype())
      throw BreakSignal{BreakCode::TensorAssignment, "x.grad = a tensor of another shape or dtype"};
  }
  grad_overlay_[real] = v;
  effects_.push_back({Effect::Kind::SetGrad, x, Var(), v, 0});
}

// ---- builtins ----------------------------------------------------------------------------------
bool Tracer::call_builtin(const std::string& name, const Var& fn, std::vector<Var>& args,
                          std::vector<Var>* out) {
  for (Var& a : args) a = spec(a);  // builtins compute with the values
  auto arg = [&](size_t j) { return j < args.size() ? args[j] : Var::nil(); };
  // Lua raises "bad argument #n (value expected)" for a missing argument, even where nil would
  // do: the modelled builtins below read missing ones as nil, so they break first
  static const std::unordered_map<std::string, size_t> min_args = {
      {"type", 1},         {"ipairs", 1},     {"pairs", 1},        {"next", 1},
      {"rawequal", 2},     {"rawlen", 1},     {"rawget", 2},       {"rawset", 3},
      {"getmetatable", 1}, {"setmetatable", 2}, {"math.type", 1},  {"select", 1},
      {"tostring", 1},     {"tonumber", 1},   {"table.concat", 1}, {"table.insert", 2},
      {"table.unpack", 1}};
  if (auto m = min_args.find(name); m != min_args.end() && args.size() < m->second)
    throw BreakSignal{BreakCode::ErrorCall, name + " without enough arguments"};
  auto need_tensor = [&](size_t j) -> const Tensor& {
    if (arg(j).k != Var::K::Tensor)
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        name + " on a value that is not a traced tensor"};
    return e_.graph.fake(args[j].ref);
  };
  // ---- tensor metadata methods (C methods of tc.Tensor) ----
  if (name.rfind("Tensor.", 0) == 0) {
    const std::string m = name.substr(7);
    if (m == "item" || m == "tolist")
      throw BreakSignal{BreakCode::ReadsTensorValue, "x:" + m + "()"};
    const Tensor& x = need_tensor(0);
    if (m == "size" || m == "stride") {
      note_size_read(args[0]);
      const Shape& s = m == "size" ? x.sizes() : x.strides();
      if (arg(1).k == Var::K::Nil) {
        if (m == "size") {
          *out = {size_table(s)};
        } else {
          Var t = new_table();
          for (int64_t v : s) tables_[t.id].array.push_back(Var::integer(v));
          *out = {t};
        }
        return true;
      }
      if (arg(1).k != Var::K::Int || x.dim() == 0)
        throw BreakSignal{BreakCode::OpFailedWhileTracing, "x:" + m + "(dim)"};
      int64_t d;
      try {
        d = wrap_dim(arg(1).i, x.dim());
      } catch (const Error& e) {
        throw BreakSignal{BreakCode::OpFailedWhileTracing, e.what()};
      }
      *out = {Var::integer(s[d])};
      return true;
    }
    if (m == "dim") {
      *out = {Var::integer(x.dim())};
      return true;
    }
    if (m == "numel" || m == "nelement") {
      note_size_read(args[0]);
      *out = {Var::integer(x.numel())};
      return true;
    }
    if (m == "is_contiguous") {
      *out = {Var::boolean(x.is_contiguous())};
      return true;
    }
    if (m == "element_size") {
      *out = {Var::integer(int64_t(x.itemsize()))};
      return true;
    }
    if (m == "is_floating_point") {
      *out = {Var::boolean(is_floating(x.dtype()))};
      return true;
    }
    throw BreakSignal{BreakCode::UnknownCFunction, name};
  }
  if (name == "tc.is_tensor") {
    *out = {Var::boolean(arg(0).k == Var::K::Tensor)};
    return true;
  }
  if (name == "tc.set_grad_enabled") {  // tc.no_grad/enable_grad: the trace runs in the new mode
    if (arg(0).k != Var::K::Bool)
      throw BreakSignal{BreakCode::UnsupportedBytecode, "tc.set_grad_enabled with a value that is not a boolean"};
    lua::set_grad_enabled(arg(0).b);  // Tracer::run restores the caller's mode
    effects_.push_back({Effect::Kind::SetGradMode, Var(), Var(), arg(0), 0});
    *out = {};
    return true;
  }
  if (name == "tc.is_grad_enabled") {
    *out = {Var::boolean(lua::grad_enabled())};
    return true;
  }
  if (name == "type") {
    const Var a = arg(0);
    const char* t = "nil";
    switch (a.k) {
      case Var::K::Nil:
        t = "nil";
        break;
      case Var::K::Bool:
        t = "boolean";
        break;
      case Var::K::Int:
      case Var::K::Float:
        t = "number";
        break;
      case Var::K::Str:
        t = "string";
        break;
      case Var::K::Tensor:
        t = "userdata";
        break;
      case Var::K::Table:
        t = "table";
        break;
      case Var::K::Closure:
        t = "function";
        break;
      case Var::K::Object:
        push_obj(a.obj);
        t = luaL_typename(L, -1);
        lua_pop(L, 1);
        break;
    }
    if (args.empty()) throw BreakSignal{BreakCode::ErrorCall, "type() without argument"};
    *out = {Var::string(t)};
    return true;
  }
  if (name == "math.type") {
    const Var a = arg(0);
    *out = {a.k == Var::K::Int     ? Var::string("integer")
            : a.k == Var::K::Float ? Var::string("float")
                                   : Var::nil()};
    if (a.k == Var::K::Tensor || a.k == Var::K::Object || a.k == Var::K::Table) *out = {Var::nil()};
    return true;
  }
  if (name == "select") {
    const Var n = arg(0);
    if (n.k == Var::K::Str && n.s == "#") {
      *out = {Var::integer(int64_t(args.size()) - 1)};
      return true;
    }
    if (n.k != Var::K::Int) throw BreakSignal{BreakCode::ErrorCall, "select with a bad index"};
    int64_t k = n.i < 0 ? int64_t(args.size()) + n.i : n.i;
    if (k < 1) throw BreakSignal{BreakCode::ErrorCall, "select index out of range"};
    out->assign(args.begin() + std::min<int64_t>(k, int64_t(args.size())), args.end());
    return true;
  }
  if (name == "ipairs") {
    lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.ipairs_aux");
    Var aux = from_lua_unguarded(-1);
    lua_pop(L, 1);
    *out = {aux, arg(0), Var::integer(0)};
    return true;
  }
  if (name == "ipairs_aux") {
    const Var i = arg(1);
    if (i.k != Var::K::Int) throw BreakSignal{BreakCode::UnsupportedBytecode, "ipairs state"};
    Var v;
    if (!index(arg(0), Var::integer(i.i + 1), &v, 0))
      throw BreakSignal{BreakCode::UnsupportedBytecode, "ipairs through an __index function"};
    if (v.k == Var::K::Nil)
      *out = {Var::nil()};
    else
      *out = {Var::integer(i.i + 1), v};
    return true;
  }
  if ((name == "pairs" || name == "next") && arg(0).k == Var::K::Object) {
    *out = iterate_real_table(name, arg(0), arg(1));
    return true;
  }
  if (name == "pairs" || name == "next") {
    // Over a table made in the trace: its construction is replayed on a real table (same sizes,
    // same keys in the same order), whose `next` order is the one the program would see.
    const Var t = arg(0);
    if (t.k != Var::K::Table || tables_[t.id].metatable)
      throw BreakSignal{BreakCode::UnorderedIteration, name};
    if (name == "pairs") {
      lua_getglobal(L, "next");
      Var nx = from_lua_unguarded(-1);
      lua_pop(L, 1);
      *out = {nx, t, Var::nil()};
      return true;
    }
    const ModelTable& m = tables_[t.id];
    if (m.order_unknown)
      throw BreakSignal{BreakCode::UnorderedIteration, "next over a table changed by table.insert"};
    const int base = lua_gettop(L);
    const int rt = replayed(t.id);
    const Replay& rp = replays_[t.id];
    // find the key after arg(1)
    if (arg(1).k == Var::K::Nil) {
      lua_pushnil(L);
    } else {
      if (!(arg(1).is_const() || arg(1).k == Var::K::Object)) {
        lua_settop(L, base);
        throw BreakSignal{BreakCode::UnorderedIteration, "next with this key"};
      }
      // Lua raises for a key that was never in the table (lua_next would raise here)
      if (!rp.keys.count(replay_key(arg(1)))) {
        lua_settop(L, base);
        throw BreakSignal{BreakCode::ErrorCall, "next with a key not in the table"};
      }
      push_var(arg(1));
    }
    const int more = lua_next(L, rt);  // keys in the log are all present or dead: no error
    Var key = more ? from_lua_unguarded(-2) : Var::nil();
    lua_settop(L, base);
    if (!more) {
      *out = {Var::nil()};
      return true;
    }
    Var v;
    index(t, key, &v, 0);
    *out = {key, v};
    return true;
  }
  if (name == "rawget") {
    const Var t = arg(0);
    if (t.k == Var::K::Object) {
      *out = {raw_get(t, arg(1))};
      return true;
    }
    if (t.k == Var::K::Table) {
      ModelTable& m = tables_[t.id];
      Var v;
      auto saved = m.metatable;
      m.metatable.reset();
      index(t, arg(1), &v, 0);
      m.metatable = saved;
      *out = {v};
      return true;
    }
    throw BreakSignal{BreakCode::ErrorCall, "rawget on a value that is not a table"};
  }
  if (name == "rawequal") {
    const Var a = arg(0), b = arg(1);
    bool same;
    if (a.k == Var::K::Object && b.k == Var::K::Object) {
      push_obj(a.obj);
      push_obj(b.obj);
      same = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
      guard_identity(a, b, same);
    } else if (a.k == Var::K::Tensor && b.k == Var::K::Tensor) {
      same = a.ref == b.ref;
    } else if (a.k == Var::K::Table && b.k == Var::K::Table) {
      same = a.id == b.id;
    } else if (a.is_const() && b.is_const()) {
      push_var(a);
      push_var(b);
      same = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
    } else {
      same = false;
    }
    *out = {Var::boolean(same)};
    return true;
  }
  if (name == "rawlen" && arg(0).k == Var::K::Table) {
    *out = {Var::integer(int64_t(tables_[arg(0).id].array.size()))};
    return true;
  }
  if (name == "rawset") {
    Var t = arg(0);
    if (t.k == Var::K::Table) {
      auto saved = tables_[t.id].metatable;
      tables_[t.id].metatable.reset();
      newindex(t, arg(1), arg(2));
      tables_[t.id].metatable = saved;
      *out = {t};
      return true;
    }
    if (t.k == Var::K::Object) {
      const std::string what = e_.guards.describe(t.src);
      if (arg(1).k != Var::K::Str && arg(1).k != Var::K::Int)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "rawset key"};
      raw_get(t, arg(1));
      overlay_[{t.obj, key_string(arg(1))}] = arg(2);
      effects_.push_back({Effect::Kind::RawSet, t, arg(1), arg(2), 0});
      *out = {t};
      return true;
    }
    throw BreakSignal{BreakCode::ErrorCall, "rawset on a value that is not a table"};
  }
  if (name == "getmetatable") {
    const Var t = arg(0);
    if (t.k == Var::K::Object) {
      Var mt = metatable_of(t);
      const Var field = mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__metatable"));
      *out = {field.k != Var::K::Nil ? field : mt};  // a protected metatable shows its field
      return true;
    }
    if (t.k == Var::K::Table) {
      const Var mt = tables_[t.id].metatable ? *tables_[t.id].metatable : Var::nil();
      const Var field = mt.k == Var::K::Nil ? mt : raw_get(mt, Var::string("__metatable"));
      *out = {field.k != Var::K::Nil ? field : mt};
      return true;
    }
    if (t.k == Var::K::Tensor) {
      luaL_getmetatable(L, lua::kTensorMeta);
      *out = {from_lua_unguarded(-1)};
      lua_pop(L, 1);
      return true;
    }
    // strings, numbers, booleans, nil and functions share one metatable per type (strings have
    // the string library's; debug.setmetatable sets the others): not guarded, so not modelled
    throw BreakSignal{BreakCode::UnknownCFunction, "getmetatable of a value that is not a table"};
  }
  if (name == "setmetatable") {
    Var t = arg(0), mt = arg(1);
    if (t.k != Var::K::Table ||
        (mt.k != Var::K::Object && mt.k != Var::K::Nil && mt.k != Var::K::Table))
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        "setmetatable on a table made outside the compiled function"};
    // Lua raises for a protected metatable; a finalizer (__gc) is registered by setmetatable
    // itself, at this point of the program: stock Lua does both
    if (tables_[t.id].metatable &&
        raw_get(*tables_[t.id].metatable, Var::string("__metatable")).k != Var::K::Nil)
      throw BreakSignal{BreakCode::ErrorCall, "setmetatable on a protected metatable"};
    if (mt.k != Var::K::Nil && raw_get(mt, Var::string("__gc")).k != Var::K::Nil)
      throw BreakSignal{BreakCode::UnknownCFunction, "setmetatable with a __gc finalizer"};
    if (mt.k == Var::K::Table) {
      tables_[t.id].metatable = mt;
    } else if (mt.k == Var::K::Object) {
      push_obj(mt.obj);
      guard_identity(mt.src, -1);
      mt.src = pin(-1, "");
      lua_pop(L, 1);
      tables_[t.id].metatable = mt;
    } else {
      tables_[t.id].metatable.reset();
    }
    *out = {t};
    return true;
  }
  if (name == "assert") {
    if (args.empty() || !args[0].truthy()) throw BreakSignal{BreakCode::ErrorCall, "assert"};
    *out = args;
    return true;
  }
  if (name == "error") throw BreakSignal{BreakCode::ErrorCall, "error"};
  if (name == "pcall") {
    // pcall(f, ...) is f(...) with a leading true; an error or a break inside f makes the whole
    // pcall the breaking call (the trace restarts there), so stock Lua catches the error.
    if (args.empty()) throw BreakSignal{BreakCode::ErrorCall, "pcall without a function"};
    Var f = args[0];
    std::vector<Var> rest(args.begin() + 1, args.end());
    const size_t depth = frames_.size();
    const Frame& caller = frames_.back();
    const vm::Ins ci = vm::decode(caller.p->code[caller.cur]);
    const int ret_a = ci.a, ret_n = ci.op == vm::OpCode::CALL ? ci.c - 1 : -1;
    std::vector<Var> immediate;
    if (call(f, std::move(rest), ret_a, ret_n, false)) {
      // done at once (a tc op or builtin): its results are in place; shift them for the true
      Frame& fr = frames_.back();
      std::vector<Var> res;
      const int n = ret_n < 0 ? fr.top - ret_a : ret_n;
      for (int j = 0; j < n; j++) res.push_back(reg(fr, ret_a + j));
      res.insert(res.begin(), Var::boolean(true));
      *out = res;
      return true;
    }
    TC_ASSERT(frames_.size() == depth + 1, "pcall pushed no frame");
    frames_.back().pcall = true;
    return false;
  }
  if (name == "table.concat") {
    const Var t = arg(0);
    if (t.k != Var::K::Table || tables_[t.id].metatable)
      throw BreakSignal{BreakCode::UnknownCFunction,
                        "table.concat of a table made outside the compiled function"};
    const Var sep = args.size() > 1 ? args[1] : Var::string("");
    std::vector<Var> parts;
    for (size_t j = 0; j < tables_[t.id].array.size(); j++) {
      if (j && !(sep.k == Var::K::Str && sep.s.empty())) parts.push_back(sep);
      parts.push_back(tables_[t.id].array[j]);
    }
    if (args.size() > 2)
      throw BreakSignal{BreakCode::UnknownCFunction, "table.concat with a range"};
    *out = {parts.empty() ? Var::string("") : concat(parts)};
    return true;
  }
  if (name == "tc._C.is_dtype") {
    const Var v = arg(0);
    bool is = false;
    if (v.k == Var::K::Object) {
      push_obj(v.obj);
      DType dt;
      is = lua_type(L, -1) == LUA_TTABLE && lua::to_dtype(L, -1, &dt);
      lua_pop(L, 1);
      if (is) {
        push_obj(v.obj);
        guard_identity(v.src, -1);
        lua_pop(L, 1);
      }
    }
    *out = {Var::boolean(is)};
    return true;
  }
  if (name == "table.unpack") {
    // t[i], ..., t[j] (lua_geti: metatables break); i and j are integers (default 1 and #t)
    const Var t = arg(0);
    const bool model = t.k == Var::K::Table && !tables_[t.id].metatable;
    if (!model && !(t.k == Var::K::Object && metatable_of(t).k == Var::K::Nil &&
                    lua_type(L, push_obj(t.obj)) == LUA_TTABLE && (lua_pop(L, 1), true)))
      throw BreakSignal{BreakCode::UnsupportedBytecode, "table.unpack of this value"};
    for (int a = 1; a <= 2; a++)
      if (arg(a).k != Var::K::Nil && arg(a).k != Var::K::Int)
        throw BreakSignal{BreakCode::UnsupportedBytecode, "table.unpack bounds that are not integers"};
    const int64_t i0 = arg(1).k == Var::K::Int ? arg(1).i : 1;
    const int64_t i1 = arg(2).k == Var::K::Int ? arg(2).i
                       : model                 ? int64_t(tables_[t.id].array.size())
                                               : len(t).i;
    out->clear();
    if (i0 > i1) return true;
    // Lua raises "too many results to unpack" from about a million values; long runs of
    // registers are not worth tracing either: stock Lua does it
    if (uint64_t(i1) - uint64_t(i0) >= 256)
      throw BreakSignal{BreakCode::UnknownCFunction, "table.unpack of more than 256 values"};
    for (int64_t k = i0;; k++) {
      out->push_back(raw_get(t, Var::integer(k)));
      if (k == i1) break;
    }
    return true;
  }
  if (name == "table.pack") {
    Var t = new_table();
    tables_[t.id].array = args;
    while (!tables_[t.id].array.empty() && tables_[t.id].array.back().k == Var::K::Nil)
      tables_[t.id].array.pop_back();
    for (size_t j = 0; j < args.size(); j++)
      if (args[j].k != Var::K::Nil && j >= tables_[t.id].array.size())
        tables_[t.id].hash.push_back({Var::integer(int64_t(j) + 1), args[j]});
    tables_[t.id].hash.push_back({Var::string("n"), Var::integer(int64_t(args.size()))});
    *out = {t};
    return true;
  }
  if (name == "table.insert") {
    Var t = arg(0);
    if (t.k != Var::K::Table || tables_[t.id].metatable)
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        "table.insert into a table made outside the compiled function"};
    auto& a = tables_[t.id].array;
    if (args.size() == 2) {
      newindex(t, Var::integer(int64_t(a.size()) + 1), args[1]);
    } else if (args.size() == 3 && args[1].k == Var::K::Int && args[1].i >= 1 &&
               args[1].i <= int64_t(a.size()) + 1) {
      a.insert(a.begin() + (args[1].i - 1), args[2]);
      tables_[t.id].order_unknown = true;
    } else {
      throw BreakSignal{BreakCode::ErrorCall, "table.insert arguments"};
    }
    out->clear();
    return true;
  }
  if (name == "tc.Size.numel" && arg(0).k == Var::K::Table) {
    int64_t p = 1;
    for (const Var& v : tables_[arg(0).id].array) p *= v.i;
    *out = {Var::integer(p)};
    return true;
  }
  if (is_pure_builtin(name)) {
    for (const Var& a : args)
      if (!a.is_const()) {
        if (a.k == Var::K::Tensor)
          throw BreakSignal{BreakCode::ReadsTensorValue, name + " of a tensor"};
        throw BreakSignal{BreakCode::UnknownCFunction, name + " on a value that is not a constant"};
      }
    const int base = lua_gettop(L);
    push_obj(fn.obj);
    for (const Var& a : args) push_var(a);
    if (lua_pcall(L, int(args.size()), LUA_MULTRET, 0) != LUA_OK) {
      lua_settop(L, base);
      throw BreakSignal{BreakCode::ErrorCall, name + " raised an error"};
    }
    out->clear();
    for (int j = base + 1; j <= lua_gettop(L); j++) {
      int t = lua_type(L, j);
      if (t != LUA_TNIL && t != LUA_TBOOLEAN && t != LUA_TNUMBER && t != LUA_TSTRING) {
        lua_settop(L, base);
        throw BreakSignal{BreakCode::UnknownCFunction,
                          name + " returned a value that is not a constant"};
      }
      out->push_back(from_lua_unguarded(j));
    }
    lua_settop(L, base);
    return true;
  }
  throw BreakSignal{BreakCode::UnknownCFunction, name};
}

// pairs(t) / next(t, k) over a table from outside the trace. Lua's `next` order depends on how
// the table was filled, so the trace follows the real table's order and guards it: a KeyOrder
// guard on t's source holds the whole key sequence (a cache hit needs the same keys in the same
// order; the guards' fast path skips it while t is byte-for-byte unchanged). Values are read
// through sources as any field. Keys must be strings, numbers or booleans.
std::vector<Var> Tracer::iterate_real_table(const std::string& name, const Var& t, const Var& k) {
  const int base = lua_gettop(L);
  const int ti = push_obj(t.obj);
  if (lua_type(L, ti) != LUA_TTABLE) {
    lua_settop(L, base);
    throw BreakSignal{BreakCode::UnorderedIteration, name + " over a value that is not a table"};
  }
  if (name == "pairs") {
    Var mt = metatable_of(t);
    if (mt.k != Var::K::Nil && raw_get(mt, Var::string("__pairs")).k != Var::K::Nil) {
      lua_settop(L, base);
      throw BreakSignal{BreakCode::UnorderedIteration, "pairs over a table with __pairs"};
    }
    lua_settop(L, base);
    lua_getglobal(L, "next");
    Var nx = from_lua_unguarded(-1);
    lua_pop(L, 1);
    return {nx, t, Var::nil()};
  }
  if (auto w = overlay_.lower_bound({t.obj, ""}); w != overlay_.end() && w->first.first == t.obj) {
    lua_settop(L, base);
    throw BreakSignal{BreakCode::UnorderedIteration, "next over a table written in the trace"};
  }
  // the whole key sequence, read once per table (the trace cannot change it: a write would be
  // in overlay_) and guarded once per source of it
  auto known = key_orders_.find(t.obj);
  if (known == key_orders_.end()) {
    KeyOrder order;
    lua_newtable(L);
    const int arr = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, ti)) {
      lua_pop(L, 1);
      const int kt = lua_type(L, -1);
      if (kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN) {
        std::string what = std::string("next over a table with ") + luaL_typename(L, -1) + " keys";
        lua_settop(L, base);
        throw BreakSignal{BreakCode::UnorderedIteration, what};
      }
      order.keys.push_back(from_lua_unguarded(-1));
      lua_pushvalue(L, -1);
      lua_rawseti(L, arr, lua_Integer(order.keys.size()));
    }
    order.k = add_k(arr);
    known = key_orders_.emplace(t.obj, std::move(order)).first;
  }
  lua_settop(L, base);
  const std::vector<Var>& keys = known->second.keys;
  if (e_.guards.first_guard(t.src, GuardKind::KeyOrder)) {
    Guard g{GuardKind::KeyOrder, t.src};
    g.k = known->second.k;
    g.expected = "the keys of " + std::to_string(keys.size()) + " entries, in the order seen";
    e_.guards.guards.push_back(g);
  }
  size_t at = 0;  // index of the next key to return
  if (k.k != Var::K::Nil) {
    const Var key = normalize_key(k);
    if (!key.is_const())
      throw BreakSignal{BreakCode::UnorderedIteration, "next with this key"};
    const std::string ks = key_string(key);
    while (at < keys.size() && key_string(keys[at]) != ks) at++;
    if (at == keys.size()) throw BreakSignal{BreakCode::ErrorCall, "next with a key not in the table"};
    at++;
  }
  if (at == keys.size()) return {Var::nil()};
  return {keys[at], raw_get(t, keys[at])};
}

std::string Tracer::replay_key(const Var& k) {
  const Var n = normalize_key(k);
  return n.k == Var::K::Object ? "o" + std::to_string(n.obj) : key_string(n);
}

// Model table `id`'s construction replayed on a real table (pushed), once per state of its log:
// the same keys set in the same order into a table of the same initial sizes has Lua's layout,
// so `next` and `#` on it answer as Lua would on the real one. Values are stand-ins (true).
int Tracer::replayed(int id) {
  const ModelTable& m = tables_[id];
  if (m.order_unknown)
    throw BreakSignal{BreakCode::UnorderedIteration, "a table changed by table.insert"};
  Replay& rp = replays_[id];
  if (rp.obj < 0 || rp.logged != m.log.size()) {
    const int base = lua_gettop(L);
    lua_createtable(L, m.narr, m.nrec);
    const int fresh = lua_gettop(L);
    rp.obj = -1;
    rp.keys.clear();
    for (auto& [k, present] : m.log) {
      if (!(k.is_const() || k.k == Var::K::Object) || k.k == Var::K::Nil) {
        lua_settop(L, base);
        throw BreakSignal{BreakCode::UnorderedIteration, "a table with keys made in the trace"};
      }
      push_var(k);
      if (present)
        lua_pushboolean(L, 1);
      else
        lua_pushnil(L);
      lua_rawset(L, fresh);
      rp.keys.insert(replay_key(k));
    }
    rp.obj = add_obj(fresh);
    rp.logged = m.log.size();
    lua_settop(L, base);
  }
  return push_obj(rp.obj);
}

}  // namespace tc::capture
