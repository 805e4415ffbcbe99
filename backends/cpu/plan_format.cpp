// The plan cache's binary form of a lowered graph (plan_format.h).
#include "plan_format.h"

#include <cstring>
#include <type_traits>

#include "tc/error.h"

namespace tc::backends::cpu {
namespace {

using lower::Val;

struct Writer {
  std::string out;
  template <typename T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void count(size_t n) { put((uint32_t)n); }
  void str(const std::string& s) {
    count(s.size());
    out += s;
  }
  template <typename T>
  void list(const std::vector<T>& v) {  // numbers, enums
    count(v.size());
    for (const T& x : v) put(x);
  }
};

struct Reader {
  const char* p;
  const char* end;
  template <typename T>
  T get() {
    T v;
    TC_CHECK(end - p >= (ptrdiff_t)sizeof v, ValueError, "cpu plan: the entry ends early");
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  // An array's length, at most the bytes left (each element takes at least one): a damaged length
  // cannot ask for an unbounded allocation.
  size_t count() {
    const size_t n = get<uint32_t>();
    TC_CHECK(n <= (size_t)(end - p), ValueError, "cpu plan: an array of %zu elements in %zu bytes", n,
             (size_t)(end - p));
    return n;
  }
  std::string str() {
    const size_t n = count();
    std::string s(p, n);
    p += n;
    return s;
  }
  template <typename T>
  std::vector<T> list() {
    std::vector<T> v(count());
    for (T& x : v) x = get<T>();
    return v;
  }
};

// ---- values (an Extern's constants) ------------------------------------------------------------

enum class Tag : uint8_t { None, Bool, Int, Double, IntList, FloatList, String, DType, Device, Tensor };

void put_value(Writer& w, const Value& v) {
  if (v.is_none()) return w.put(Tag::None);
  if (v.is_bool()) return w.put(Tag::Bool), w.put((uint8_t)v.to_bool());
  if (v.is_int()) return w.put(Tag::Int), w.put(v.to_int());
  if (v.is_double()) return w.put(Tag::Double), w.put(v.to_double());
  if (v.is_int_list()) return w.put(Tag::IntList), w.list(v.ints());
  if (v.is_float_list()) return w.put(Tag::FloatList), w.list(v.floats());
  if (v.is_string()) return w.put(Tag::String), w.str(v.str());
  if (v.is_dtype()) return w.put(Tag::DType), w.put(v.dtype());
  if (v.is_device()) return w.put(Tag::Device), w.str(v.device().str());
  TC_CHECK(v.is_tensor(), NotImplementedError, "cpu plan: a list of tensors as a graph constant");
  const Tensor& t = v.tensor();
  TC_CHECK(t.device().is_cpu() && t.numel() <= 4096, NotImplementedError,
           "cpu plan: a graph constant tensor of %lld elements on %s", (long long)t.numel(), t.device().str().c_str());
  const Tensor c = t.contiguous();
  w.put(Tag::Tensor);
  w.put(t.dtype());
  w.list(t.sizes());
  w.put((uint8_t)t.is_wrapped_number());
  w.str(std::string(static_cast<const char*>(c.data_ptr()), (size_t)c.numel() * itemsize(c.dtype())));
}

Value get_value(Reader& r) {
  switch (r.get<Tag>()) {
    case Tag::None: return Value();
    case Tag::Bool: return Value(r.get<uint8_t>() != 0);
    case Tag::Int: return Value(r.get<int64_t>());
    case Tag::Double: return Value(r.get<double>());
    case Tag::IntList: return Value(r.list<int64_t>());
    case Tag::FloatList: return Value(r.list<double>());
    case Tag::String: return Value(r.str());
    case Tag::DType: return Value(r.get<DType>());
    case Tag::Device: return Value(Device::parse(r.str()));
    case Tag::Tensor: {
      const DType dtype = r.get<DType>();
      const Shape sizes = r.list<int64_t>();
      const bool wrapped = r.get<uint8_t>() != 0;
      const std::string data = r.str();
      auto impl = std::make_shared<TensorImpl>(*Tensor::empty(sizes, dtype).impl());
      impl->wrapped_number = wrapped;
      Tensor x(std::move(impl));
      TC_CHECK(data.size() == (size_t)x.numel() * itemsize(dtype), ValueError,
               "cpu plan: a tensor constant has %zu bytes for %lld elements", data.size(), (long long)x.numel());
      std::memcpy(x.data_ptr(), data.data(), data.size());
      return Value(x);
    }
  }
  TC_FAIL(ValueError, "cpu plan: an unknown constant tag");
}

// ---- graph-level sizes and views -----------------------------------------------------------------

void put_sym(Writer& w, const lower::SymInt& s) {
  w.count(s.terms.size());
  for (const lower::SymInt::Term& t : s.terms) {
    w.put(t.c);
    w.list(t.syms);
  }
}
lower::SymInt get_sym(Reader& r) {
  lower::SymInt s;
  s.terms.resize(r.count());
  for (lower::SymInt::Term& t : s.terms) {
    t.c = r.get<int64_t>();
    t.syms = r.list<int>();
  }
  return s;
}
// Arrays of structs: a count, then each element.
template <typename T, typename Put>
void put_each(Writer& w, const std::vector<T>& v, Put put) {
  w.count(v.size());
  for (const T& x : v) put(w, x);
}
template <typename T, typename Get>
std::vector<T> get_each(Reader& r, Get get) {
  std::vector<T> v(r.count());
  for (T& x : v) x = get(r);
  return v;
}
void put_syms(Writer& w, const std::vector<lower::SymInt>& v) { put_each(w, v, put_sym); }
std::vector<lower::SymInt> get_syms(Reader& r) { return get_each<lower::SymInt>(r, get_sym); }

void put_view(Writer& w, const lower::BufferView& v) {
  w.put(v.buffer);
  put_sym(w, v.offset);
  put_syms(w, v.sizes);
  put_syms(w, v.strides);
}
lower::BufferView get_view(Reader& r) {
  lower::BufferView v;
  v.buffer = r.get<int>();
  v.offset = get_sym(r);
  v.sizes = get_syms(r);
  v.strides = get_syms(r);
  return v;
}
void put_views(Writer& w, const std::vector<lower::BufferView>& v) { put_each(w, v, put_view); }
std::vector<lower::BufferView> get_views(Reader& r) { return get_each<lower::BufferView>(r, get_view); }

// ---- kernels ---------------------------------------------------------------------------------------

void put_reductions(Writer& w, const std::vector<lower::Reduction>& rs) {
  w.count(rs.size());
  for (const lower::Reduction& x : rs) {
    w.put(x.op), w.put(x.input), w.put(x.index), w.put(x.result), w.put(x.value);
    w.put((uint8_t)x.ordered_fma);
  }
}
std::vector<lower::Reduction> get_reductions(Reader& r) {
  std::vector<lower::Reduction> rs(r.count());
  for (lower::Reduction& x : rs) {
    x.op = r.get<lower::ReduceOp>();
    x.input = r.get<Val>(), x.index = r.get<Val>(), x.result = r.get<Val>(), x.value = r.get<Val>();
    x.ordered_fma = r.get<uint8_t>() != 0;
  }
  return rs;
}

void put_stmt(Writer& w, const lower::Stmt& s) {
  w.put(s.kind);
  w.list(s.extents);
  w.list(s.body);
  put_reductions(w, s.reductions);
  w.count(s.stores.size());
  for (const lower::Store& x : s.stores) w.put(x.buffer), w.put(x.index), w.put(x.value);
}
lower::Stmt get_stmt(Reader& r) {
  lower::Stmt s;
  s.kind = r.get<lower::Stmt::Kind>();
  s.extents = r.list<Val>();
  s.body = r.list<Val>();
  s.reductions = get_reductions(r);
  s.stores.resize(r.count());
  for (lower::Store& x : s.stores) {
    x.buffer = r.get<int>();
    x.index = r.get<Val>(), x.value = r.get<Val>();
  }
  return s;
}

void put_kernel(Writer& w, const lower::Kernel& k) {
  w.str(k.name);
  w.count(k.buffers.size());
  for (const lower::BufferParam& b : k.buffers) w.put(b.dtype), w.put((uint8_t)b.written);
  w.put(k.num_size_params);
  w.count(k.instrs.size());
  for (const lower::Instr& in : k.instrs) {
    w.put(in.op), w.put(in.ty), w.put(in.sop);
    w.put(in.a), w.put(in.b), w.put(in.c);
    w.put(in.i), w.put(in.f);
  }
  w.list(k.preamble);
  w.list(k.outer);
  w.count(k.body.size());
  for (const lower::Stmt& s : k.body) put_stmt(w, s);
  put_reductions(w, k.outer_reductions);
  put_stmt(w, k.final);
  w.list(k.source_nodes);
  w.list(k.source_lines);
}
lower::Kernel get_kernel(Reader& r) {
  lower::Kernel k;
  k.name = r.str();
  k.buffers.resize(r.count());
  for (lower::BufferParam& b : k.buffers) {
    b.dtype = r.get<DType>();
    b.written = r.get<uint8_t>() != 0;
  }
  k.num_size_params = r.get<int>();
  k.instrs.resize(r.count());
  for (lower::Instr& in : k.instrs) {
    in.op = r.get<lower::Opc>(), in.ty = r.get<lower::Ty>(), in.sop = r.get<lower::ScalarOp>();
    in.a = r.get<Val>(), in.b = r.get<Val>(), in.c = r.get<Val>();
    in.i = r.get<int64_t>(), in.f = r.get<double>();
  }
  k.preamble = r.list<Val>();
  k.outer = r.list<Val>();
  k.body.resize(r.count());
  for (lower::Stmt& s : k.body) s = get_stmt(r);
  k.outer_reductions = get_reductions(r);
  k.final = get_stmt(r);
  k.source_nodes = r.list<int>();
  k.source_lines = r.list<int>();
  return k;
}

}  // namespace

std::string encode_plan(const lower::LoweredGraph& g) {
  TC_CHECK(g.index_checks.empty(), NotImplementedError, "cpu plan: a graph with index checks");
  Writer w;
  w.count(g.kernels.size());
  for (const lower::Kernel& k : g.kernels) put_kernel(w, k);
  w.count(g.buffers.size());
  for (const lower::Buffer& b : g.buffers) {
    w.put(b.kind), w.put(b.dtype);
    put_sym(w, b.numel);
    w.put(b.io), w.put(b.offset);
  }
  w.count(g.symbols.size());
  for (const lower::Symbol& s : g.symbols) w.put(s.input), w.put(s.dim);
  w.count(g.tied.size());
  for (const lower::TiedDim& t : g.tied) w.put(t.input), w.put(t.dim), w.put(t.symbol);
  w.count(g.steps.size());
  for (const lower::Step& s : g.steps) {
    w.put(s.kind);
    if (s.kind == lower::Step::Kind::Launch) {
      w.put(s.launch.kernel);
      w.list(s.launch.buffers);
      put_syms(w, s.launch.sizes);
      continue;
    }
    const lower::Extern& e = s.ext;
    TC_CHECK(!e.external, NotImplementedError, "cpu plan: the graph calls %s, a function kept in the graph",
             e.external->name.c_str());
    w.put(e.op);
    put_views(w, e.inputs);
    w.count(e.constants.size());
    for (const Value& v : e.constants) put_value(w, v);
    put_view(w, e.output);
    w.put((uint8_t)e.fallback);
    put_views(w, e.more_outputs);
    w.list(e.arg_kinds);
    w.put(e.node);
  }
  put_views(w, g.outputs);
  w.put(g.arena_bytes_static);
  w.put(g.num_fused_nodes);
  w.count(g.perf_hints.size());
  for (const std::string& h : g.perf_hints) w.str(h);
  return std::move(w.out);
}

lower::LoweredGraph decode_plan(const std::string& bytes) {
  Reader r{bytes.data(), bytes.data() + bytes.size()};
  lower::LoweredGraph g;
  g.kernels.resize(r.count());
  for (lower::Kernel& k : g.kernels) k = get_kernel(r);
  g.buffers.resize(r.count());
  for (lower::Buffer& b : g.buffers) {
    b.kind = r.get<lower::Buffer::Kind>(), b.dtype = r.get<DType>();
    b.numel = get_sym(r);
    b.io = r.get<int>(), b.offset = r.get<int64_t>();
  }
  g.symbols.resize(r.count());
  for (lower::Symbol& s : g.symbols) s.input = r.get<int>(), s.dim = r.get<int>();
  g.tied.resize(r.count());
  for (lower::TiedDim& t : g.tied) {
    t.input = r.get<int>(), t.dim = r.get<int>(), t.symbol = r.get<int>();
    TC_CHECK(t.symbol >= 0 && t.symbol < int(g.symbols.size()), ValueError, "a tied dim names symbol %d of %d", t.symbol,
             int(g.symbols.size()));
  }
  g.steps.resize(r.count());
  for (lower::Step& s : g.steps) {
    s.kind = r.get<lower::Step::Kind>();
    if (s.kind == lower::Step::Kind::Launch) {
      s.launch.kernel = r.get<int>();
      TC_CHECK(s.launch.kernel >= 0 && s.launch.kernel < (int)g.kernels.size(), ValueError,
               "cpu plan: a launch of kernel %d of %zu", s.launch.kernel, g.kernels.size());
      s.launch.buffers = r.list<int>();
      s.launch.sizes = get_syms(r);
      continue;
    }
    lower::Extern& e = s.ext;
    e.op = r.get<Op>();
    TC_CHECK((int)e.op < kNumOps, ValueError, "cpu plan: op number %d of %d", (int)e.op, kNumOps);
    e.inputs = get_views(r);
    e.constants.resize(r.count());
    for (Value& v : e.constants) v = get_value(r);
    e.output = get_view(r);
    e.fallback = r.get<uint8_t>() != 0;
    e.more_outputs = get_views(r);
    e.arg_kinds = r.list<int>();
    e.node = r.get<int>();
  }
  g.outputs = get_views(r);
  g.arena_bytes_static = r.get<int64_t>();
  g.num_fused_nodes = r.get<int>();
  g.perf_hints.resize(r.count());
  for (std::string& h : g.perf_hints) h = r.str();
  TC_CHECK(r.p == r.end, ValueError, "cpu plan: %zu bytes after the plan", (size_t)(r.end - r.p));
  return g;
}

}  // namespace tc::backends::cpu
