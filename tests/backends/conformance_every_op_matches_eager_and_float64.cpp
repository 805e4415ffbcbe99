// The conformance harness: every op of ops.def, through capture (tc.compile(f, {backend = B,
// fullgraph = true})), on the op test cases of tests/fixtures (each dtype they cover) and on
// contiguous, strided, transposed and broadcast copies of their inputs and on sizes 0, 1 and odd,
// compared with eager and with a float64 computation (DESIGN.md §4: compiled error at most 2x
// eager's error plus a small tolerance, 3x for float16/bfloat16; integer and bool results exact).
// An op that runs on eager inside the compiled graph (the partitioner's fallback_nodes) fails
// unless tests/backends/conformance_allowlist.txt lists it for the backend.
//
//   build/tests/backends_conformance_every_op_matches_eager_and_float64 [--backend=NAME] [--full]
//       [--device=cuda [--compile-only]]
//
// --backend: the backend under test (default eager). --full: every fixture case with every
// layout and size variant (default: the first case of each dtype combination as given, and the
// variants of one case per op: a CI run of a minute or two on a code generator). --device: the
// inputs' device (default cpu; their layouts are kept), eager and float64 run there too.
// --compile-only (with --device=cuda, no GPU needed): CUDA tensors live in host memory and
// nothing is launched, so values are not compared; a case fails when the compiled call raises
// CompileError (a generated program NVRTC rejects) or runs on eager without being allowlisted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../fixture_cases.h"
#include "../gtest_exit_code.h"
#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/vm/runtime.h"

namespace tc::conformance {
namespace {

using fixture::json;

std::string g_backend = "eager";
bool g_full = false;
Device g_device;
bool g_compile_only = false;

// Ops not run here, with the reason (everything else in ops.def must have a case).
const std::map<std::string, std::string>& excluded() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    for (int i = 0; i < kNumOps; i++) {
      const OpSchema& s = schema(Op(i));
      if (s.kind == OpKind::Random)
        out[s.name] = "random: its values are a Philox stream, checked by stdlib/random_philox_streams";
      if (s.kind == OpKind::DataDependent)
        out[s.name] = "data-dependent output shape: a graph break under capture, never in a graph";
      if (std::string(s.name).starts_with("_fused_"))
        out[s.name] = "optimizer step over tensor lists, in place: tests/lua/test_optim_steps.lua (fused vs per "
                      "parameter vs PyTorch, compiled) and tests/cuda/fused_optim_matches_cpu";
    }
    for (const char* g : {"_batch_norm_backward", "_conv2d_weight_backward"})
      out[g] = "a derivative's kernel: batch_norm's and conv2d's gradients against PyTorch and gradcheck "
               "(tests/lua/test_autograd_torch.lua, test_gradcheck.lua), CUDA against the CPU in "
               "tests/cuda/cudnn_plans_cached_per_problem";
    out["_max_pool2d_backward"] = "a derivative's kernel: max_pool2d's gradient on CUDA against its decomposition's "
                                  "(tests/lua/test_autograd_cuda.lua), the CPU kernel in tests/lua/test_autograd.lua";
    out["empty"] = "uninitialized values: nothing to compare";
    out["detach"] = "no fixture case: an alias without autograd, covered by tests/capture";
    out["to_device"] = "moves between devices: the CUDA tests (tests/cuda) run it";
    return out;
  }();
  return m;
}

// "<backend> <op>" lines of the allowlist: ops that may run on eager inside compiled graphs.
std::set<std::string> allowlist() {
  std::set<std::string> out;
  std::ifstream f(TC_SOURCE_DIR "/tests/backends/conformance_allowlist.txt");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string backend, op;
    if (line.empty() || line[0] == '#' || !(in >> backend >> op)) continue;
    out.insert(backend + " " + op);
  }
  return out;
}

const std::map<std::string, std::vector<json>>& cases_by_op() {
  static const std::map<std::string, std::vector<json>> m = [] {
    std::map<std::string, std::vector<json>> out;
    for (const std::string& file : fixture::fixture_files()) {
      std::ifstream f(file);
      json j = json::parse(f);
      for (json& c : j["cases"]) out[c["op"].get<std::string>()].push_back(std::move(c));
    }
    return out;
  }();
  return m;
}

// ---- inputs: the fixture's tensors, in several layouts and sizes --------------------------------

enum class Variant { AsGiven, Contiguous, Strided, Transposed, Broadcast, Size0, Size1, SizeOdd, SizeOdd2 };
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::AsGiven: return "as given";
    case Variant::Contiguous: return "contiguous";
    case Variant::Strided: return "strided";
    case Variant::Transposed: return "transposed";
    case Variant::Broadcast: return "broadcast";
    case Variant::Size0: return "size 0";
    case Variant::Size1: return "size 1";
    case Variant::SizeOdd: return "size 7";
    case Variant::SizeOdd2: return "size 17";
  }
  return "?";
}

Tensor filled(const Shape& sizes, const Shape& strides, int64_t storage, int64_t offset, const Tensor& src) {
  Tensor base = Tensor::empty({storage}, src.dtype());
  base.copy_from(Tensor::scalar(0).to(src.dtype()));
  Tensor v = base.as_strided(sizes, strides, offset);
  v.copy_from(src);
  return v;
}

// The same values in another layout, or other values (broadcast, sizes) of the same kind.
Tensor transform(const Tensor& t, Variant v) {
  const Shape& s = t.sizes();
  const int64_t n = t.numel();
  switch (v) {
    case Variant::AsGiven:
      return t;
    case Variant::Contiguous:
      return t.clone();
    case Variant::Strided: {  // every other element, from offset 1
      if (t.dim() == 0) return t;
      Shape st = contiguous_strides(s);
      for (int64_t& x : st) x *= 2;
      return filled(s, st, 2 * n + 1, 1, t);
    }
    case Variant::Transposed: {  // column-major: dims in reverse memory order
      if (t.dim() < 2) return t;
      Shape st(s.size());
      int64_t step = 1;
      for (size_t d = 0; d < s.size(); d++) st[d] = step, step *= std::max<int64_t>(s[d], 1);
      return filled(s, st, std::max<int64_t>(n, 1), 0, t);
    }
    case Variant::Broadcast: {  // the first slice along dim 1, expanded (stride 0)
      if (t.dim() == 0 || s[0] < 2) return t;
      Shape st = contiguous_strides(s);
      st[0] = 0;
      Shape one = s;
      one[0] = 1;
      Tensor first = t.as_strided(one, t.strides(), t.offset()).clone();
      return first.as_strided(s, st, 0);
    }
    case Variant::Size0:
    case Variant::Size1:
    case Variant::SizeOdd:
    case Variant::SizeOdd2: {  // every dim of size > 1 gets the new size; values cycle the old ones
      const int64_t size = v == Variant::Size0 ? 0 : v == Variant::Size1 ? 1 : v == Variant::SizeOdd ? 7 : 17;
      Shape ns = s;
      for (int64_t& d : ns)
        if (d != 1) d = size;
      Tensor out = Tensor::empty(ns, t.dtype());
      if (out.numel() == 0) return out;
      Tensor flat = t.contiguous();
      if (n == 0) {
        out.copy_from(Tensor::scalar(0).to(t.dtype()));
        return out;
      }
      const size_t item = t.itemsize();
      auto* dst = static_cast<char*>(out.data_ptr());
      auto* src = static_cast<const char*>(flat.data_ptr());
      for (int64_t i = 0; i < out.numel(); i++) std::memcpy(dst + i * item, src + (i % n) * item, item);
      return out;
    }
  }
  return t;
}

Value transform_value(const Value& v, Variant var) {
  if (v.is_tensor()) return v.tensor().dim() == 0 ? v : Value(transform(v.tensor(), var));
  if (v.is_tensor_list()) {
    TensorList l;
    for (const Tensor& t : v.tensors()) l.push_back(transform(t, var));
    return l;
  }
  return v;
}

struct Args {
  Stack pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// t on g_device with the same sizes, strides and offset (its whole storage copied); wrapped
// numbers stay on the CPU, as eager takes them with tensors of any device.
Tensor on_device(const Tensor& t) {
  if (g_device.is_cpu() || t.is_wrapped_number()) return t;
  const size_t bytes = t.storage()->nbytes();
  std::shared_ptr<Storage> st = Storage::allocate(bytes, g_device);
  if (bytes) device_allocator(g_device.type)->copy(st->data(), g_device, t.storage()->data(), Device(), bytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = st;
  impl->offset = t.offset();
  impl->sizes = t.sizes();
  impl->strides = t.strides();
  impl->dtype = t.dtype();
  impl->device = g_device;
  return Tensor(std::move(impl));
}

Value device_value(const Value& v) {
  if (v.is_tensor()) return on_device(v.tensor());
  if (v.is_tensor_list()) {
    TensorList l;
    for (const Tensor& t : v.tensors()) l.push_back(on_device(t));
    return l;
  }
  return v;
}

Args make_args(const json& c, Variant var) {
  Args a;
  for (const json& x : c["args"])
    a.pos.push_back(device_value(transform_value(fixture::make_arg(x, Device()), var)));
  for (auto& [k, x] : c["kwargs"].items())
    a.kw.emplace_back(k, device_value(transform_value(fixture::make_arg(x, Device()), var)));
  return a;
}

// Floating tensors as float64 (same layout does not matter: values only).
Value to_f64(const Value& v) {
  if (v.is_tensor() && is_floating(v.tensor().dtype()) && !v.tensor().is_wrapped_number())
    return v.tensor().to(DType::Float64);
  if (v.is_tensor_list()) {
    TensorList l;
    for (const Tensor& t : v.tensors()) l.push_back(is_floating(t.dtype()) ? t.to(DType::Float64) : t);
    return l;
  }
  return v;
}

// ---- running: eager (C++), float64 (C++), compiled (through capture) -----------------------------

struct Outcome {
  std::string error;  // error kind, empty if it ran
  std::string message;
  std::vector<Tensor> outs;     // results, then the tensors the op writes into (Tensor! args)
};

std::vector<int> mutated_positions(Op op) {
  std::vector<int> out;
  const OpSchema& s = schema(op);
  for (int i = 0; i < int(s.args.size()); i++)
    if (s.args[i].mutated) out.push_back(i);
  return out;
}

void flatten(const Value& v, std::vector<Tensor>* out) {
  if (v.is_tensor()) out->push_back(v.tensor());
  if (v.is_tensor_list())
    for (const Tensor& t : v.tensors()) out->push_back(t);
}

Outcome run_eager(Op op, const Args& a) {
  Outcome o;
  try {
    Stack bound = bind(op, a.pos, a.kw);
    for (const Value& v : call(op, bound)) flatten(v, &o.outs);
    for (int i : mutated_positions(op)) flatten(bound[i], &o.outs);
  } catch (const Error& e) {
    o.error = error_kind_name(e.kind());
    o.message = e.what();
  }
  return o;
}

vm::Runtime& runtime() {
  static vm::Runtime* rt = [] {
    auto* r = new vm::Runtime("conformance");
    capture::install(r->state(), backends::graph_compiler());
    return r;
  }();
  return *rt;
}

// (backend, case source, op name, args...) -> stats after the call, then pcall's results of the
// compiled call. The case source is a function of the op returning the function compiled: it
// makes lists and the keyword table in the traced code, as user code does (`tc.cat({a, b}, 1)`).
const char* const kRunner = R"LUA(
local tc = require "tc"
local made = {}
return function(backend, src, name, ...)
  tc.compiler.reset()
  local make = made[src]
  if not make then
    make = assert(load(src, "=case"))
    made[src] = make
  end
  local cf = tc.compile(make()(tc[name]), {backend = backend, fullgraph = true})
  local r = table.pack(pcall(cf, ...))
  return tc.compiler.stats(), table.unpack(r, 1, r.n)
end
)LUA";

// The case's call as Lua source, and the values its parameters take.
std::string case_source(const Args& a, std::vector<vm::Arg>* params) {
  int n = 0;
  std::string names, call;
  auto param = [&](const Value& v) {
    params->emplace_back(v);
    std::string p = "p" + std::to_string(++n);
    names += (names.empty() ? "" : ", ") + p;
    return p;
  };
  auto expr = [&](const Value& v) -> std::string {
    if (v.is_none()) return "nil";
    if (!v.is_tensor_list()) return param(v);
    std::string l;
    for (const Tensor& t : v.tensors()) l += (l.empty() ? "" : ", ") + param(Value(t));
    return "{" + l + "}";
  };
  for (const Value& v : a.pos) call += (call.empty() ? "" : ", ") + expr(v);
  if (!a.kw.empty()) {
    std::string kw;
    for (const auto& [k, v] : a.kw) kw += (kw.empty() ? "" : ", ") + ("[\"" + k + "\"] = ") + expr(v);
    call += (call.empty() ? "{" : ", {") + kw + "}";
  }
  return "return function(op) return function(" + names + ") return op(" + call + ") end end";
}

Outcome run_compiled(Op op, const Args& a, int64_t* fallback_nodes) {
  static vm::Ref runner = runtime().run_string(kRunner, "=conformance")[0];
  std::vector<vm::Arg> params;
  const std::string src = case_source(a, &params);
  std::vector<vm::Arg> args{vm::Arg(Value(g_backend)), vm::Arg(Value(src)), vm::Arg(Value(std::string(op_name(op))))};
  args.insert(args.end(), params.begin(), params.end());
  Outcome o;
  try {
    vm::Results r = runner.call(args);
    *fallback_nodes = r[0]["fallback_nodes"].integer();
    if (!r[1].boolean()) {
      vm::Ref err = r[2];
      o.error = err.type_name() == "table" ? err["kind"].string() : "error";
      o.message = err.type_name() == "table" ? err["message"].string() : err.string();
      return o;
    }
    for (size_t i = 2; i < r.size(); i++) flatten(r[i].value(), &o.outs);
    // the tensors written into: the compiled call got `a`'s tensors themselves
    Stack bound = bind(op, a.pos, a.kw);
    for (int i : mutated_positions(op)) flatten(bound[i], &o.outs);
  } catch (const std::exception& e) {
    o.error = "harness";
    o.message = e.what();
  }
  return o;
}

// ---- comparing ------------------------------------------------------------------------------

std::vector<double> values_of(const Tensor& t) {
  Tensor d = Tensor::empty(t.sizes(), DType::Float64);
  if (t.numel()) d.copy_from(t);
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

// "" when `got` (compiled) is as close to `ref` (float64) as DESIGN.md §4 asks given eager's error.
std::string compare(const Tensor& got, const Tensor& eager, const Tensor* ref) {
  if (got.dtype() != eager.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", eager gives " + dtype_name(eager.dtype());
  if (got.sizes() != eager.sizes())
    return "shape " + shape_string(got.sizes()) + ", eager gives " + shape_string(eager.sizes());
  const std::vector<double> c = values_of(got), e = values_of(eager);
  if (!is_floating(eager.dtype())) {
    for (size_t i = 0; i < c.size(); i++)
      if (c[i] != e[i]) return "element " + std::to_string(i) + ": " + std::to_string(c[i]) + ", eager gives " + std::to_string(e[i]);
    return "";
  }
  const bool half = eager.dtype() == DType::Float16 || eager.dtype() == DType::BFloat16;
  const double k = half ? 3 : 2;
  const double tol = half ? 1e-3 : eager.dtype() == DType::Float32 ? 1e-5 : 1e-10;
  std::vector<double> r = ref && ref->sizes() == eager.sizes() ? values_of(*ref) : e;
  double err_c = 0, err_e = 0, scale = 1;
  for (size_t i = 0; i < c.size(); i++) {
    if (std::isnan(e[i]) || std::isinf(e[i])) {
      if (!(std::isnan(e[i]) ? std::isnan(c[i]) : c[i] == e[i]))
        return "element " + std::to_string(i) + ": " + std::to_string(c[i]) + ", eager gives " + std::to_string(e[i]);
      continue;
    }
    if (!std::isfinite(c[i])) return "element " + std::to_string(i) + ": " + std::to_string(c[i]) + ", eager gives " + std::to_string(e[i]);
    if (!std::isfinite(r[i])) continue;
    scale = std::max(scale, std::fabs(r[i]));
    err_c = std::max(err_c, std::fabs(c[i] - r[i]));
    err_e = std::max(err_e, std::fabs(e[i] - r[i]));
  }
  if (err_c <= k * err_e + tol * scale) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf, "error vs float64 %.3g, eager's %.3g (allowed %.3g)", err_c, err_e,
                k * err_e + tol * scale);
  return buf;
}

struct Tally {
  int cases = 0, compared_f64 = 0, raised = 0;
  std::set<std::string> fell_back;  // ops that ran on eager inside a compiled graph
};
Tally& tally() {
  static Tally t;
  return t;
}

// Runs one case in one variant; returns "" or what went wrong.
std::string check(Op op, const json& c, Variant var) {
  static const bool trace = std::getenv("TC_CONFORMANCE_TRACE") != nullptr;  // which case aborted
  if (trace) std::fprintf(stderr, "case %s, %s\n", c["name"].get<std::string>().c_str(), variant_name(var));
  Args ea = make_args(c, var), ca = make_args(c, var);
  Outcome eager = run_eager(op, ea);
  int64_t fallback = 0;
  Outcome got = run_compiled(op, ca, &fallback);
  tally().cases++;
  const std::string where = std::string(" [") + c["name"].get<std::string>() + ", " + variant_name(var) + "]";
  if (!eager.error.empty() || !got.error.empty()) {
    tally().raised++;
    if (eager.error.empty()) return "compiled raised " + got.error + ": " + got.message + where;
    // under fullgraph an op that rejects its arguments while tracing is a graph break (TC0301),
    // with the op's own message (or the Lua binding's: an empty table `{}` is no tensor list)
    const bool same = got.error == eager.error ||
                      (got.error == "GraphBreakError" &&
                       got.message.find("rejected its arguments while tracing") != std::string::npos);
    if (!same)
      return "eager raised " + eager.error + " (" + eager.message + "), compiled " +
             (got.error.empty() ? "ran" : "raised " + got.error + ": " + got.message) + where;
    return "";
  }
  if (g_compile_only) {  // values are garbage: only NVRTC's verdict and the fallbacks count
    if (got.error == "CompileError") return "compiled raised CompileError: " + got.message.substr(0, 4000) + where;
    if (!got.error.empty()) return "";
  }
  if (fallback > 0) tally().fell_back.insert(op_name(op));
  if (fallback > 0 && !allowlist().count(g_backend + " " + op_name(op)))
    return "runs on eager inside the compiled graph (" + std::to_string(fallback) +
           " fallback nodes) and tests/backends/conformance_allowlist.txt does not list it" + where;
  if (g_compile_only) return "";
  if (got.outs.size() != eager.outs.size())
    return std::to_string(got.outs.size()) + " results, eager gives " + std::to_string(eager.outs.size()) + where;
  Outcome ref;
  bool any_float = false;
  for (const Tensor& t : eager.outs) any_float |= is_floating(t.dtype());
  if (any_float) {
    Args ra = make_args(c, var);
    for (Value& v : ra.pos) v = to_f64(v);
    for (auto& [k, v] : ra.kw) v = to_f64(v);
    ref = run_eager(op, ra);
    if (ref.error.empty() && ref.outs.size() == eager.outs.size()) tally().compared_f64++;
  }
  for (size_t i = 0; i < got.outs.size(); i++) {
    const Tensor* r = ref.error.empty() && ref.outs.size() == eager.outs.size() ? &ref.outs[i] : nullptr;
    std::string d = compare(got.outs[i], eager.outs[i], r);
    if (!d.empty()) return "result " + std::to_string(i + 1) + ": " + d + where;
  }
  return "";
}

std::string dtype_key(const json& c) {
  std::string k;
  for (const json& a : c["args"])
    if (a.contains("tensor")) k += a["tensor"]["dtype"].get<std::string>() + ",";
  return k;
}

bool is_float32(const json& c) { return dtype_key(c).rfind("float32,", 0) == 0; }

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, MatchesEagerAndFloat64) {
  const std::string name = GetParam();
  const Op op = *op_from_name(name);
  if (excluded().count(name)) GTEST_SKIP() << excluded().at(name);
  auto it = cases_by_op().find(name);
  ASSERT_TRUE(it != cases_by_op().end()) << name << " has no case in tests/fixtures and no reason to be excluded";
  const std::vector<json>& cases = it->second;
  const std::vector<Variant> layouts = {Variant::Contiguous, Variant::Strided, Variant::Transposed, Variant::Broadcast};
  std::vector<Variant> sizes = {Variant::Size0, Variant::Size1, Variant::SizeOdd};
  if (g_full) sizes.push_back(Variant::SizeOdd2);
  // the case the variants start from: the first float32 one without an expected error
  const json* base = nullptr;
  for (const json& c : cases)
    if (!c.contains("error") && (!base || (is_float32(c) && !is_float32(*base)))) base = &c;
  std::set<std::string> dtypes_seen;
  int failures = 0;
  for (const json& c : cases) {
    const bool first_of_dtype = dtypes_seen.insert(dtype_key(c)).second;
    std::vector<Variant> vs;
    if (g_full || first_of_dtype) vs.push_back(Variant::AsGiven);
    // compile-only (CI without a GPU, NVRTC takes its time): each dtype as given, no variants
    if (g_full || (&c == base && !g_compile_only)) {
      vs.insert(vs.end(), layouts.begin(), layouts.end());
      vs.insert(vs.end(), sizes.begin(), sizes.end());
    }
    for (Variant v : vs) {
      std::string d = check(op, c, v);
      if (!d.empty() && failures++ < 5) ADD_FAILURE() << name << ": " << d;
    }
  }
}

std::vector<std::string> all_ops() {
  std::vector<std::string> out;
  for (int i = 0; i < kNumOps; i++) out.push_back(op_name(Op(i)));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ops, Conformance, ::testing::ValuesIn(all_ops()),
                         [](const auto& info) { return info.param; });

// The allowlist names ops of ops.def and backends of the registry (a typo would allow nothing).
TEST(ConformanceAllowlist, NamesKnownBackendsAndOps) {
  const std::vector<std::string> backends = backends::names();
  for (const std::string& line : allowlist()) {
    const std::string backend = line.substr(0, line.find(' ')), op = line.substr(line.find(' ') + 1);
    EXPECT_NE(std::find(backends.begin(), backends.end(), backend), backends.end()) << line;
    EXPECT_TRUE(op_from_name(op).has_value()) << line;
  }
}

class Summary : public ::testing::Environment {
  void TearDown() override {
    std::printf("conformance: backend \"%s\"%s: %d cases (%d raised in both, %d compared with float64), %zu ops excluded\n",
                g_backend.c_str(), g_full ? " (--full)" : "", tally().cases, tally().raised,
                tally().compared_f64, excluded().size());
    std::string on_eager, stale;
    for (const std::string& op : tally().fell_back) on_eager += " " + op;
    for (const std::string& line : allowlist())
      if (line.rfind(g_backend + " ", 0) == 0 && !tally().fell_back.count(line.substr(g_backend.size() + 1)))
        stale += " " + line.substr(g_backend.size() + 1);
    if (!on_eager.empty()) std::printf("ran on eager inside compiled graphs:%s\n", on_eager.c_str());
    if (!stale.empty()) std::printf("allowlisted but compiled now (remove from the allowlist):%s\n", stale.c_str());
  }
};

}  // namespace
}  // namespace tc::conformance

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a.rfind("--backend=", 0) == 0) {
      tc::conformance::g_backend = a.substr(10);
    } else if (a == "--full") {
      tc::conformance::g_full = true;
    } else if (a.rfind("--device=", 0) == 0) {
      tc::conformance::g_device = tc::Device::parse(a.substr(9));
    } else if (a == "--compile-only") {
      tc::conformance::g_compile_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [gtest options] [--backend=NAME] [--full] [--device=cuda [--compile-only]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (tc::conformance::g_compile_only) {
    if (!tc::conformance::g_device.is_cuda()) {
      std::fprintf(stderr, "--compile-only needs --device=cuda\n");
      return 2;
    }
    tc::cuda::set_compile_only(true);
    try {  // NVRTC is all compile-only mode needs: without it, nothing to test
      tc::call1(tc::Op::neg, {tc::Tensor::empty({4}, tc::DType::Float32, tc::conformance::g_device)});
    } catch (const tc::Error& e) {
      if (e.kind() == tc::ErrorKind::DeviceError) {
        std::printf("skip: %s\n", e.what());
        return 77;  // ctest's SKIP_RETURN_CODE: Skipped, not Passed
      }
    }
  }
  tc::backends::find(tc::conformance::g_backend);  // an unknown name: the registry's error
  ::testing::AddGlobalTestEnvironment(new tc::conformance::Summary);
  return gtest_exit_code(RUN_ALL_TESTS());
}
