// JSON form of a lowered graph (lowered_json.h).
#include "lowered_json.h"

#include <cstring>

#include "tc/error.h"

namespace tc::lower {

using nlohmann::json;

namespace {

// Doubles travel as their bit pattern (JSON has no inf/nan and may round).
std::string f64_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)u);
  return buf;
}
double f64_from(const json& j) {
  uint64_t u = std::stoull(j.get<std::string>(), nullptr, 16);
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    const uint8_t b = static_cast<const uint8_t*>(p)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}
void unhex(const std::string& s, void* p, size_t n) {
  TC_CHECK(s.size() == 2 * n, ValueError, "package plan: a tensor constant has %zu hex digits for %zu bytes", s.size(),
           n);
  for (size_t i = 0; i < n; i++) static_cast<uint8_t*>(p)[i] = (uint8_t)std::stoul(s.substr(2 * i, 2), nullptr, 16);
}

}  // namespace

DType dtype_from_json(const json& j) {
  DType d;
  TC_CHECK(dtype_from_name(j.get<std::string>(), &d), ValueError, "package: unknown dtype '%s'",
           j.get<std::string>().c_str());
  return d;
}

namespace {}  // namespace

json value_to_json(const Value& v) {
  if (v.is_none()) return nullptr;
  if (v.is_bool()) return {{"b", v.to_bool()}};
  if (v.is_int()) return {{"i", v.to_int()}};
  if (v.is_double()) return {{"f", f64_bits(v.to_double())}};
  if (v.is_int_list()) return {{"il", v.ints()}};
  if (v.is_float_list()) {
    json l = json::array();
    for (double d : v.floats()) l.push_back(f64_bits(d));
    return {{"fl", l}};
  }
  if (v.is_string()) return {{"s", v.str()}};
  if (v.is_dtype()) return {{"dtype", dtype_name(v.dtype())}};
  if (v.is_device()) return {{"device", v.device().str()}};
  if (v.is_tensor()) {
    const Tensor& t = v.tensor();
    TC_CHECK(t.device().is_cpu() && t.numel() <= 4096, NotImplementedError,
             "tc.aot.compile: a graph constant tensor of %lld elements on %s cannot be packaged", (long long)t.numel(),
             t.device().str().c_str());
    Tensor c = t.contiguous();
    return {{"t",
             {{"dtype", dtype_name(t.dtype())},
              {"sizes", t.sizes()},
              {"wrapped", t.is_wrapped_number()},
              {"data", hex(c.data_ptr(), (size_t)c.numel() * itemsize(c.dtype()))}}}};
  }
  TC_FAIL(NotImplementedError, "tc.aot.compile: a list of tensors as a graph constant cannot be packaged");
}

namespace {

Value value_from_json(const json& j) {
  if (j.is_null()) return Value();
  if (j.contains("b")) return Value(j["b"].get<bool>());
  if (j.contains("i")) return Value(j["i"].get<int64_t>());
  if (j.contains("f")) return Value(f64_from(j["f"]));
  if (j.contains("il")) return Value(j["il"].get<IntList>());
  if (j.contains("fl")) {
    FloatList l;
    for (const json& x : j["fl"]) l.push_back(f64_from(x));
    return Value(std::move(l));
  }
  if (j.contains("s")) return Value(j["s"].get<std::string>());
  if (j.contains("dtype")) return Value(dtype_from_json(j["dtype"]));
  if (j.contains("device")) return Value(Device::parse(j["device"].get<std::string>()));
  if (j.contains("t")) {
    const json& t = j["t"];
    auto impl =
        std::make_shared<TensorImpl>(*Tensor::empty(t["sizes"].get<Shape>(), dtype_from_json(t["dtype"])).impl());
    impl->wrapped_number = t["wrapped"].get<bool>();
    Tensor x(std::move(impl));
    unhex(t["data"].get<std::string>(), x.data_ptr(), (size_t)x.numel() * itemsize(x.dtype()));
    return Value(x);
  }
  TC_FAIL(ValueError, "package plan: unknown constant %s", j.dump().c_str());
}

json sym_to_json(const lower::SymInt& s) {
  if (s.is_const()) return s.const_value();
  json terms = json::array();
  for (const auto& t : s.terms) terms.push_back({t.c, t.syms});
  return terms;
}
lower::SymInt sym_from_json(const json& j) {
  if (j.is_number_integer()) return lower::SymInt::of(j.get<int64_t>());
  lower::SymInt s;
  for (const json& t : j) s.terms.push_back({t[0].get<int64_t>(), t[1].get<std::vector<int>>()});
  return s;
}
json syms_to_json(const std::vector<lower::SymInt>& v) {
  json a = json::array();
  for (const auto& s : v) a.push_back(sym_to_json(s));
  return a;
}
std::vector<lower::SymInt> syms_from_json(const json& j) {
  std::vector<lower::SymInt> v;
  for (const json& x : j) v.push_back(sym_from_json(x));
  return v;
}

json view_to_json(const lower::BufferView& v) {
  return {{"buffer", v.buffer},
          {"offset", sym_to_json(v.offset)},
          {"sizes", syms_to_json(v.sizes)},
          {"strides", syms_to_json(v.strides)}};
}
lower::BufferView view_from_json(const json& j) {
  lower::BufferView v;
  v.buffer = j["buffer"].get<int>();
  v.offset = sym_from_json(j["offset"]);
  v.sizes = syms_from_json(j["sizes"]);
  v.strides = syms_from_json(j["strides"]);
  return v;
}
json views_to_json(const std::vector<lower::BufferView>& v) {
  json a = json::array();
  for (const auto& x : v) a.push_back(view_to_json(x));
  return a;
}
std::vector<lower::BufferView> views_from_json(const json& j) {
  std::vector<lower::BufferView> v;
  for (const json& x : j) v.push_back(view_from_json(x));
  return v;
}

json reductions_to_json(const std::vector<lower::Reduction>& rs) {
  json a = json::array();
  for (const lower::Reduction& r : rs) a.push_back({(int)r.op, r.input, r.index, r.result, r.value, r.ordered_fma});
  return a;
}
std::vector<lower::Reduction> reductions_from_json(const json& j) {
  std::vector<lower::Reduction> rs;
  for (const json& r : j)
    rs.push_back({(lower::ReduceOp)r[0].get<int>(), r[1].get<lower::Val>(), r[2].get<lower::Val>(),
                  r[3].get<lower::Val>(), r[4].get<lower::Val>(), r[5].get<bool>()});
  return rs;
}
json stmt_to_json(const lower::Stmt& st) {
  json stores = json::array();
  for (const lower::Store& x : st.stores) stores.push_back({x.buffer, x.index, x.value});
  return {{"kind", (int)st.kind},
          {"extents", st.extents},
          {"body", st.body},
          {"reductions", reductions_to_json(st.reductions)},
          {"stores", stores}};
}
lower::Stmt stmt_from_json(const json& x) {
  lower::Stmt st;
  st.kind = (lower::Stmt::Kind)x["kind"].get<int>();
  st.extents = x["extents"].get<std::vector<lower::Val>>();
  st.body = x["body"].get<std::vector<lower::Val>>();
  st.reductions = reductions_from_json(x["reductions"]);
  for (const json& t : x["stores"])
    st.stores.push_back({t[0].get<int>(), t[1].get<lower::Val>(), t[2].get<lower::Val>()});
  return st;
}

json kernel_to_json(const lower::Kernel& k) {
  json buffers = json::array(), instrs = json::array(), body = json::array();
  for (const lower::BufferParam& b : k.buffers) buffers.push_back({dtype_name(b.dtype), b.written});
  for (const lower::Instr& in : k.instrs)
    instrs.push_back({(int)in.op, (int)in.ty, (int)in.sop, in.a, in.b, in.c, in.i, f64_bits(in.f)});
  for (const lower::Stmt& st : k.body) body.push_back(stmt_to_json(st));
  json j = {{"name", k.name},
            {"buffers", buffers},
            {"num_size_params", k.num_size_params},
            {"instrs", instrs},
            {"preamble", k.preamble},
            {"outer", k.outer},
            {"body", body},
            {"source_nodes", k.source_nodes},
            {"source_lines", k.source_lines}};
  if (k.two_level()) {  // (absent in other kernels: packages without them read as before)
    j["outer_reductions"] = reductions_to_json(k.outer_reductions);
    j["final"] = stmt_to_json(k.final);
  }
  return j;
}

lower::Kernel kernel_from_json(const json& j) {
  lower::Kernel k;
  k.name = j["name"].get<std::string>();
  for (const json& b : j["buffers"]) k.buffers.push_back({dtype_from_json(b[0]), b[1].get<bool>()});
  k.num_size_params = j["num_size_params"].get<int>();
  for (const json& x : j["instrs"]) {
    lower::Instr in;
    in.op = (lower::Opc)x[0].get<int>();
    in.ty = (lower::Ty)x[1].get<int>();
    in.sop = (lower::ScalarOp)x[2].get<int>();
    in.a = x[3].get<lower::Val>(), in.b = x[4].get<lower::Val>(), in.c = x[5].get<lower::Val>();
    in.i = x[6].get<int64_t>();
    in.f = f64_from(x[7]);
    k.instrs.push_back(in);
  }
  k.source_nodes = j["source_nodes"].get<std::vector<int>>();
  k.source_lines = j["source_lines"].get<std::vector<int>>();
  k.preamble = j["preamble"].get<std::vector<lower::Val>>();
  k.outer = j["outer"].get<std::vector<lower::Val>>();
  for (const json& x : j["body"]) k.body.push_back(stmt_from_json(x));
  if (j.contains("outer_reductions")) {
    k.outer_reductions = reductions_from_json(j["outer_reductions"]);
    k.final = stmt_from_json(j["final"]);
  }
  return k;
}
}  // namespace

json lowered_to_json(const LoweredGraph& g, const LibraryCalls& calls) {
  json j;
  json kernels = json::array();
  for (const Kernel& k : g.kernels) kernels.push_back(kernel_to_json(k));
  j["kernels"] = kernels;
  json buffers = json::array();
  for (const lower::Buffer& b : g.buffers)
    buffers.push_back({{"kind", (int)b.kind},
                       {"dtype", dtype_name(b.dtype)},
                       {"numel", sym_to_json(b.numel)},
                       {"io", b.io},
                       {"offset", b.offset}});
  j["buffers"] = buffers;
  json symbols = json::array();
  for (const lower::Symbol& s : g.symbols) symbols.push_back({s.input, s.dim});
  j["symbols"] = symbols;
  json tied = json::array();
  for (const lower::TiedDim& t : g.tied) tied.push_back({t.input, t.dim, t.symbol});
  if (!tied.empty()) j["tied"] = tied;
  json steps = json::array();
  for (const lower::Step& s : g.steps) {
    if (s.kind == lower::Step::Kind::Launch) {
      steps.push_back(
          {{"launch", s.launch.kernel}, {"buffers", s.launch.buffers}, {"sizes", syms_to_json(s.launch.sizes)}});
      continue;
    }
    const lower::Extern& e = s.ext;
    TC_CHECK(!e.external || (calls && calls(e.external->name)), NotImplementedError,
             "tc.aot.compile: the graph calls '%s', a function kept in the graph (allow_in_graph): "
             "a package cannot "
             "hold Lua functions",
             e.external->name.c_str());
    json constants = json::array();
    for (const Value& v : e.constants) constants.push_back(value_to_json(v));
    steps.push_back({{"extern", e.external ? "" : op_name(e.op)},
                     {"library", e.external ? e.external->name : ""},
                     {"inputs", views_to_json(e.inputs)},
                     {"constants", constants},
                     {"output", view_to_json(e.output)},
                     {"more_outputs", views_to_json(e.more_outputs)},
                     {"arg_kinds", e.arg_kinds},
                     {"fallback", e.fallback},
                     {"node", e.node}});
  }
  j["steps"] = steps;
  j["outputs"] = views_to_json(g.outputs);
  j["arena_bytes_static"] = g.arena_bytes_static;
  j["index_checks"] = g.index_checks.size();  // the kernels' device-side index checks (flag numbers 1..n)
  return j;
}

void lowered_from_json(const json& j, LoweredGraph* g, const LibraryCalls& calls) {
  for (const json& k : j["kernels"]) g->kernels.push_back(kernel_from_json(k));
  for (const json& b : j["buffers"]) {
    lower::Buffer buf;
    buf.kind = (lower::Buffer::Kind)b["kind"].get<int>();
    buf.dtype = dtype_from_json(b["dtype"]);
    buf.numel = sym_from_json(b["numel"]);
    buf.io = b["io"].get<int>();
    buf.offset = b["offset"].get<int64_t>();
    g->buffers.push_back(std::move(buf));
  }
  for (const json& s : j["symbols"]) g->symbols.push_back({s[0].get<int>(), s[1].get<int>()});
  if (j.contains("tied"))
    for (const json& t : j["tied"]) {
      lower::TiedDim d{t[0].get<int>(), t[1].get<int>(), t[2].get<int>()};
      TC_CHECK(d.symbol >= 0 && d.symbol < int(g->symbols.size()), ValueError, "a tied dim names symbol %d of %d",
               d.symbol, int(g->symbols.size()));
      g->tied.push_back(d);
    }
  for (const json& s : j["steps"]) {
    lower::Step step;
    if (s.contains("launch")) {
      step.kind = lower::Step::Kind::Launch;
      step.launch.kernel = s["launch"].get<int>();
      step.launch.buffers = s["buffers"].get<std::vector<int>>();
      step.launch.sizes = syms_from_json(s["sizes"]);
      TC_CHECK(step.launch.kernel >= 0 && step.launch.kernel < (int)g->kernels.size(), ValueError,
               "tc.aot.load: the package's plan launches kernel %d of %zu", step.launch.kernel, g->kernels.size());
    } else {
      step.kind = lower::Step::Kind::Extern;
      lower::Extern& e = step.ext;
      const std::string op = s["extern"].get<std::string>(), library = s["library"].get<std::string>();
      if (library.empty()) {
        std::optional<Op> o = op_from_name(op);
        TC_CHECK(o.has_value(), ValueError, "tc.aot.load: the package calls op '%s', which this tc lacks", op.c_str());
        e.op = *o;
      } else {
        e.external = calls ? calls(library) : nullptr;
        TC_CHECK(e.external != nullptr, ValueError,
                 "tc.aot.load: the package calls library function '%s', which this "
                 "tc lacks",
                 library.c_str());
      }
      e.inputs = views_from_json(s["inputs"]);
      for (const json& c : s["constants"]) e.constants.push_back(value_from_json(c));
      e.output = view_from_json(s["output"]);
      e.more_outputs = views_from_json(s["more_outputs"]);
      e.arg_kinds = s["arg_kinds"].get<std::vector<int>>();
      e.fallback = s["fallback"].get<bool>();
      e.node = s["node"].get<int>();
    }
    g->steps.push_back(std::move(step));
  }
  g->outputs = views_from_json(j["outputs"]);
  g->arena_bytes_static = j["arena_bytes_static"].get<int64_t>();
  // A flagged check raises IndexError from run(): the package keeps no graph, so no user line.
  const size_t checks = j.value("index_checks", size_t(0));
  for (size_t i = 0; i < checks; i++)
    g->index_checks.push_back({-1, [](int64_t v, const std::vector<int64_t>&, Device) {
                                 TC_FAIL(IndexError, "index %lld is out of range (checked in the package's kernels)",
                                         (long long)v);
                               }});
}

}  // namespace tc::lower
