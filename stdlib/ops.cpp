// The op registry: schemas parsed once from ops.def, argument binding, and dispatch through
// meta rule then device kernel.
#include "tc/ops.h"

#include "tc/autograd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

namespace tc {
namespace {

struct RawRow {
  Op op;
  const char* name;
  OpKind kind;
  OpGroup group;
  const char* args;
  const char* ret;
};
const RawRow kRows[] = {
#define TC_OP(name, kind, group, args, ret) {Op::name, #name, OpKind::kind, OpGroup::group, args, ret},
#include "tc/ops.def"
#undef TC_OP
};

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (char c : s) {
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == '[' || c == '(')) depth++;
    if (!quoted && (c == ']' || c == ')')) depth--;
    if (c == ',' && depth == 0 && !quoted) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) out.push_back(trim(cur));
  return out;
}

Value parse_default(const std::string& text, const ArgSpec& a, const char* op) {
  if (text == "None") return Value();
  if (text == "True") return Value(true);
  if (text == "False") return Value(false);
  if (text.size() >= 2 && text.front() == '"') return Value(text.substr(1, text.size() - 2));
  if (text.front() == '[') {
    IntList l;
    for (auto& p : split_top(text.substr(1, text.size() - 2))) l.push_back(std::strtoll(p.c_str(), nullptr, 10));
    return Value(l);
  }
  bool is_float = text.find_first_of(".eE") != std::string::npos;
  if (a.type == ArgType::Float || a.type == ArgType::FloatOrTensor || (a.type == ArgType::Scalar && is_float))
    return Value(std::strtod(text.c_str(), nullptr));
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  TC_ASSERT(end && *end == 0, "bad default in ops.def");
  if (a.type == ArgType::IntList || a.type == ArgType::DimList || a.type == ArgType::Padding) return Value(IntList{v});
  (void)op;
  return Value((int64_t)v);
}

ArgSpec parse_arg(std::string text, bool kwonly, const char* op) {
  ArgSpec a;
  a.kwonly = kwonly;
  size_t eq = text.find('=');
  std::string def;
  if (eq != std::string::npos) {
    def = trim(text.substr(eq + 1));
    text = trim(text.substr(0, eq));
  }
  size_t sp = text.rfind(' ');
  TC_ASSERT(sp != std::string::npos, "ops.def argument without a name");
  std::string type = text.substr(0, sp);
  a.name = text.substr(sp + 1);
  if (type.size() > 3 && type.substr(type.size() - 3) == "...") {
    a.varargs = true;
    type = type.substr(0, type.size() - 3) + "[]";
  }
  if (type.back() == '?') {
    a.optional = true;
    type.pop_back();
  }
  if (type.back() == '!') {
    a.mutated = true;
    type.pop_back();
  }
  static const std::pair<const char*, ArgType> types[] = {
      {"Tensor", ArgType::Tensor}, {"Tensor[]", ArgType::TensorList}, {"Scalar", ArgType::Scalar},
      {"int", ArgType::Int},       {"float", ArgType::Float},         {"float|Tensor", ArgType::FloatOrTensor},
      {"float[]", ArgType::FloatList},
      {"bool", ArgType::Bool},     {"int[]", ArgType::IntList},       {"Dim", ArgType::Dim},
      {"Dim[]", ArgType::DimList}, {"str", ArgType::Str},             {"ScalarType", ArgType::ScalarType},
      {"Device", ArgType::Device}, {"Padding", ArgType::Padding}};
  bool found = false;
  for (auto& [n, t] : types)
    if (type == n) {
      a.type = t;
      found = true;
    }
  TC_ASSERT(found, "unknown argument type in ops.def");
  if (!def.empty()) {
    a.has_default = true;
    a.default_value = parse_default(def, a, op);
  }
  return a;
}

std::vector<OpSchema> build_schemas() {
  std::vector<OpSchema> out;
  for (const RawRow& r : kRows) {
    OpSchema s{r.op, r.name, r.kind, r.group, {}, ReturnKind::Tensor, 1};
    bool kwonly = false;
    for (auto& part : split_top(r.args)) {
      if (part == "*") {
        kwonly = true;
        continue;
      }
      s.args.push_back(parse_arg(part, kwonly, r.name));
    }
    std::string ret = r.ret;
    if (ret == "Tensor[]") {
      s.returns = ReturnKind::List;
    } else if (ret != "Tensor") {
      s.returns = ReturnKind::Tuple;
      s.num_returns = (int)split_top(ret).size();
    }
    out.push_back(std::move(s));
  }
  return out;
}

const std::vector<OpSchema>& schemas() {
  static const std::vector<OpSchema> s = build_schemas();
  return s;
}

const char* type_name(ArgType t) {
  switch (t) {
    case ArgType::Tensor: return "Tensor";
    case ArgType::TensorList: return "Tensor[]";
    case ArgType::Scalar: return "Scalar";
    case ArgType::Int: return "int";
    case ArgType::Float: return "float";
    case ArgType::FloatOrTensor: return "float|Tensor";
    case ArgType::FloatList: return "float[]";
    case ArgType::Bool: return "bool";
    case ArgType::IntList: return "int[]";
    case ArgType::Dim: return "Dim";
    case ArgType::DimList: return "Dim[]";
    case ArgType::Str: return "str";
    case ArgType::ScalarType: return "ScalarType";
    case ArgType::Device: return "Device";
    case ArgType::Padding: return "Padding";
  }
  return "?";
}

const char* value_type_name(const Value& v) {
  if (v.is_none()) return "nil";
  if (v.is_tensor()) return "Tensor";
  if (v.is_tensor_list()) return "Tensor[]";
  if (v.is_bool()) return "boolean";
  if (v.is_int()) return "integer";
  if (v.is_double()) return "number";
  if (v.is_int_list()) return "integer list";
  if (v.is_float_list()) return "number list";
  if (v.is_string()) return "string";
  if (v.is_dtype()) return "dtype";
  return "device";
}

// In int64's range and whole (a cast of 2^63 or 1e30 to int64 is undefined).
bool is_integral_double(double d) { return d >= -0x1p63 && d < 0x1p63 && d == (double)(int64_t)d; }

[[noreturn]] void bad_arg(const OpSchema& s, const ArgSpec& a, const Value& v) {
  TC_FAIL(ValueError, "%s(): argument '%s' must be %s%s, not %s", s.name, a.name.c_str(),
          type_name(a.type), a.optional ? " or nil" : "", value_type_name(v));
}

// Converts `v` to the argument's type, or throws.
Value coerce(const OpSchema& s, const ArgSpec& a, Value v) {
  if (v.is_none()) {
    if (a.optional) return v;
    bad_arg(s, a, v);
  }
  switch (a.type) {
    case ArgType::Tensor:
      if (v.is_tensor()) return v;
      if (v.is_bool()) return Value(Tensor::scalar_bool(v.to_bool(), true));
      if (v.is_int()) return Value(Tensor::scalar_int(v.to_int(), DType::Int64, true));
      if (v.is_double()) return Value(Tensor::scalar(v.to_double(), DType::Float64, true));
      break;
    case ArgType::TensorList:
      if (v.is_tensor_list()) return v;
      if (v.is_tensor()) return Value(TensorList{v.tensor()});
      break;
    case ArgType::Scalar:
      if (v.is_number()) return v;
      if (v.is_tensor() && v.tensor().numel() == 1 && !v.tensor().is_fake()) {
        const Tensor& t = v.tensor();
        if (is_floating(t.dtype())) return Value(t.item_double());
        if (t.dtype() == DType::Bool) return Value(t.item_int() != 0);
        return Value(t.item_int());
      }
      break;
    case ArgType::Int:
    case ArgType::Dim:
      if (v.is_int()) return v;
      if (v.is_double() && is_integral_double(v.to_double())) return Value((int64_t)v.to_double());
      break;
    case ArgType::Float:
      if (v.is_int() || v.is_double()) return Value(v.to_double());
      break;
    case ArgType::FloatOrTensor:
      if (v.is_int() || v.is_double()) return Value(v.to_double());
      if (v.is_tensor() && v.tensor().dim() == 0) return v;  // kept: the kernel reads it (on the device)
      if (v.is_tensor())
        TC_FAIL(ValueError, "%s(): argument '%s' must be a number or a 0-dim tensor, not a tensor of shape %s", s.name,
                a.name.c_str(), shape_string(v.tensor().sizes()).c_str());
      break;
    case ArgType::Bool:
      if (v.is_bool()) return v;
      break;
    case ArgType::IntList:
    case ArgType::DimList:
    case ArgType::Padding:
      if (v.is_int_list()) return v;
      if (v.is_int()) return Value(IntList{v.to_int()});
      if (v.is_double() && is_integral_double(v.to_double())) return Value(IntList{(int64_t)v.to_double()});
      if (a.type == ArgType::Padding && v.is_string()) {
        if (v.str() == "same" || v.str() == "valid") return v;
        TC_FAIL(ValueError, "%s(): padding must be \"same\", \"valid\" or integers, not \"%s\"", s.name, v.str().c_str());
      }
      if (v.is_tensor_list() && v.tensors().empty()) return Value(IntList{});
      if (v.is_float_list()) {
        IntList l;
        for (double d : v.floats()) {
          if (!is_integral_double(d)) bad_arg(s, a, v);
          l.push_back((int64_t)d);
        }
        return Value(l);
      }
      break;
    case ArgType::FloatList:
      if (v.is_float_list()) return v;
      if (v.is_int_list()) return Value(FloatList(v.ints().begin(), v.ints().end()));
      if (v.is_number()) return Value(FloatList{v.to_double()});
      break;
    case ArgType::Str:
      if (v.is_string()) return v;
      break;
    case ArgType::ScalarType:
      if (v.is_dtype()) return v;
      if (v.is_string()) {
        DType t;
        if (dtype_from_name(v.str(), &t)) return Value(t);
        TC_FAIL(DTypeError, "%s(): unknown dtype '%s'", s.name, v.str().c_str());
      }
      break;
    case ArgType::Device:
      if (v.is_device()) return v;
      if (v.is_string()) return Value(Device::parse(v.str()));
      break;
  }
  bad_arg(s, a, v);
}

DType g_default_dtype = DType::Float32;
Device g_default_device{};

}  // namespace

std::string OpSchema::signature() const {
  std::string s = std::string(name) + "(";
  bool kw = false;
  for (size_t i = 0; i < args.size(); i++) {
    const ArgSpec& a = args[i];
    if (a.kwonly && !kw) {
      s += "*, ";
      kw = true;
    }
    s += std::string(type_name(a.type)) + (a.optional ? "?" : "") + (a.varargs ? "..." : "") + " " + a.name;
    if (i + 1 < args.size()) s += ", ";
  }
  return s + ")";
}

const OpSchema& schema(Op op) { return schemas()[(size_t)op]; }
const char* op_name(Op op) { return schemas()[(size_t)op].name; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpSchema& s : schemas())
    if (name == s.name) return s.op;
  return std::nullopt;
}

Stack bind(Op op, Stack positional, std::vector<std::pair<std::string, Value>> keywords) {
  const OpSchema& s = schema(op);
  Stack out(s.args.size());
  TC_ASSERT(s.args.size() <= 64, "op with more than 64 arguments");
  uint64_t set = 0;  // bit i: argument i was given
  size_t pi = 0;
  for (size_t i = 0; i < s.args.size() && pi < positional.size(); i++) {
    const ArgSpec& a = s.args[i];
    if (a.kwonly) break;
    if (a.varargs && positional[pi].is_number()) {
      // int... : gather the remaining numbers
      IntList l;
      for (; pi < positional.size(); pi++) {
        Value c = coerce(s, ArgSpec{a.name, ArgType::Int}, positional[pi]);
        l.push_back(c.to_int());
      }
      out[i] = Value(l);
    } else {
      out[i] = coerce(s, a, std::move(positional[pi++]));
    }
    set |= uint64_t(1) << i;
  }
  TC_CHECK(pi == positional.size(), ValueError, "%s() takes at most %zu positional arguments but %zu were given",
           s.name, pi, positional.size());
  for (auto& [name, v] : keywords) {
    size_t i = 0;
    while (i < s.args.size() && s.args[i].name != name) i++;
    TC_CHECK(i < s.args.size(), ValueError, "%s() got an unexpected option '%s' (signature: %s)", s.name,
             name.c_str(), s.signature().c_str());
    TC_CHECK(!(set >> i & 1), ValueError, "%s() got multiple values for argument '%s'", s.name, name.c_str());
    out[i] = coerce(s, s.args[i], std::move(v));
    set |= uint64_t(1) << i;
  }
  for (size_t i = 0; i < s.args.size(); i++) {
    if (set >> i & 1) continue;
    const ArgSpec& a = s.args[i];
    if (a.has_default)
      out[i] = a.default_value;
    else if (a.varargs)
      out[i] = Value(IntList{});
    else
      TC_CHECK(a.optional, ValueError, "%s() missing required argument '%s' (signature: %s)", s.name,
               a.name.c_str(), s.signature().c_str());
  }
  return out;
}

namespace {
Metas group_meta(Op op, const Stack& args) {
  switch (schema(op).group) {
    case OpGroup::pointwise: return meta_pointwise(op, args);
    case OpGroup::reduction: return meta_reduction(op, args);
    case OpGroup::view: return meta_view(op, args);
    case OpGroup::movement: return meta_movement(op, args);
    case OpGroup::linalg: return meta_linalg(op, args);
    case OpGroup::nn: return meta_nn(op, args);
    case OpGroup::creation: return meta_creation(op, args);
  }
  TC_ASSERT(false, "bad op group");
}
}  // namespace

Metas infer_meta(Op op, const Stack& args) {
  Metas m = group_meta(op, args);
  // Every result, eager or traced, is a tensor that can exist: no negative size, numel and
  // storage span within int64 (ShapeError), bytes within int64 (OutOfMemoryError). A
  // data-dependent op's meta has -1 for the sizes its kernel finds.
  if (schema(op).kind == OpKind::DataDependent) return m;
  for (const TensorMeta& t : m) {
    for (int64_t s : t.sizes)
      TC_CHECK(s >= 0, ShapeError, "%s(): the result would have the negative size %lld in shape %s", op_name(op),
               (long long)s, shape_string(t.sizes).c_str());
    storage_nbytes(t.sizes, t.strides, 0, t.dtype);
  }
  return m;
}

namespace {

// All tensors of an op must share a device, except CPU 0-dim tensors and wrapped numbers.
Device common_device(Op op, const Stack& args, bool* any_fake) {
  // Transfers are the ops whose tensors may live on different devices; they run on the host
  // side through Tensor::copy_from, which drives the device allocator's copies.
  bool transfer = op == Op::copy_ || op == Op::to_device;
  std::optional<Device> dev;
  const Tensor* first = nullptr;
  auto visit = [&](const Tensor& t) {
    if (!t.defined()) return;
    if (t.is_fake()) *any_fake = true;
    if (transfer || (t.dim() == 0 && t.device().is_cpu())) return;
    if (!dev) {
      dev = t.device();
      first = &t;
    } else if (*dev != t.device()) {
      TC_FAIL(DeviceError, "%s(): expected all tensors to be on the same device, but found at least two devices, %s and %s",
              op_name(op), first->device().str().c_str(), t.device().str().c_str());
    }
  };
  for (const Value& v : args) {
    if (v.is_tensor()) visit(v.tensor());
    if (v.is_tensor_list())
      for (const Tensor& t : v.tensors()) visit(t);
  }
  return dev.value_or(Device{});
}

Stack run_kernel(Op op, const Stack& args, const Metas& m, Device dev) {
  const OpSchema& s = schema(op);
#ifdef TC_HAVE_CUDA
  if (op != Op::copy_ && op != Op::to_device && (dev.is_cuda() || (!m.empty() && m[0].device.is_cuda())))
    return cuda_dispatch(op, args, m);
#endif
  if (!dev.is_cpu()) {
    TC_FAIL(DeviceError, "%s(): no kernel for device %s yet", s.name, dev.str().c_str());
  }
  switch (s.group) {
    case OpGroup::pointwise: return cpu_pointwise(op, args, m);
    case OpGroup::reduction: return cpu_reduction(op, args, m);
    case OpGroup::view: return cpu_view(op, args, m);
    case OpGroup::movement: return cpu_movement(op, args, m);
    case OpGroup::linalg: return cpu_linalg(op, args, m);
    case OpGroup::nn: return cpu_nn(op, args, m);
    case OpGroup::creation: return cpu_creation(op, args, m);
  }
  TC_ASSERT(false, "bad op group");
}

thread_local CallObserver* t_observer = nullptr;
// Threads with an observer set: while none has, `call` reads no thread-local (in a PIC build a
// thread-local read is a call of __tls_get_addr).
std::atomic<int> g_observing{0};

Stack call_unobserved(Op op, const Stack& args);

// A call while an observer is set: neither the nested calls it makes nor the observer's own
// calls are observed.
[[gnu::noinline]] Stack call_observed(Op op, const Stack& args) {
  struct Restore {
    CallObserver* o;
    ~Restore() { t_observer = o; }
  } restore{t_observer};
  t_observer = nullptr;
  Stack out = call_unobserved(op, args);
  restore.o->on_call(op, args, out);
  return out;
}

}  // namespace

CallObserver* set_call_observer(CallObserver* o) {
  CallObserver* prev = t_observer;
  if (!prev && o) g_observing.fetch_add(1, std::memory_order_relaxed);
  if (prev && !o) g_observing.fetch_sub(1, std::memory_order_relaxed);
  t_observer = o;
  return prev;
}

Stack call(Op op, const Stack& args) {
  if (g_observing.load(std::memory_order_relaxed) != 0 && t_observer) [[unlikely]]
    return call_observed(op, args);
  return call_unobserved(op, args);
}

namespace {
Stack call_unobserved(Op op, const Stack& args) {
  bool fake = false;
  Device dev = common_device(op, args, &fake);
  const OpSchema& s = schema(op);
  if (fake) {
    TC_CHECK(s.kind != OpKind::DataDependent, ValueError, "%s(): output shape depends on tensor values", s.name);
    Metas m = infer_meta(op, args);
    Stack out;
    TensorList list;
    for (const TensorMeta& t : m) {
      Tensor f = Tensor::fake(t.sizes, t.strides, t.dtype, t.device);
      f.impl()->offset = t.offset;
      if (s.returns == ReturnKind::List)
        list.push_back(f);
      else
        out.push_back(f);
    }
    if (s.returns == ReturnKind::List) out.push_back(Value(list));
    return out;
  }
  Metas m = infer_meta(op, args);
  bool record = autograd::should_record(args);
  Stack out;
  if (record) {
    autograd::check_inplace(op, args);
    if (autograd::forward_decomposed(op, args, out)) return out;
  }
  {
    // kernels that call other ops (composites) must not record those: the op records as a whole
    std::optional<GradModeGuard> below;
    if (grad_enabled()) below.emplace(false);
    out = run_kernel(op, args, m, dev);
  }
  if (record)
    autograd::record(op, args, out);
  else if (s.kind == OpKind::View)  // views of tensors that require grad: not without a record
    autograd::mark_new_outputs(op, args, out);
  return out;
}
}  // namespace

Tensor call1(Op op, Stack positional, std::vector<std::pair<std::string, Value>> keywords) {
  Stack out = call(op, bind(op, std::move(positional), std::move(keywords)));
  TC_ASSERT(!out.empty() && out[0].is_tensor(), "call1 on an op without a tensor result");
  return out[0].tensor();
}

TensorMeta contiguous_meta(const Shape& sizes, DType dtype, Device device) {
  return TensorMeta{sizes, contiguous_strides(sizes), 0, dtype, device, -1};
}

Tensor empty_from_meta(const TensorMeta& m) { return Tensor::empty_strided(m.sizes, m.strides, m.dtype, m.device); }

namespace {
// PyTorch's combine_categories: `higher` wins unless a lower tier brings a higher category.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || (lower && is_floating(*lower)))
    return lower ? promote_types(*higher, *lower) : *higher;
  return higher;
}
}  // namespace

DType result_type(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : tensors) ptrs.push_back(&t);
  return result_type(ptrs.data(), ptrs.size());
}

DType result_type(const Tensor* const* tensors, size_t n) {
  // Three tiers, PyTorch order: tensors with dims, 0-dim tensors, wrapped numbers.
  std::optional<DType> dim_t, zero_t, wrapped_t;
  for (size_t i = 0; i < n; i++) {
    const Tensor& t = *tensors[i];
    if (!t.defined()) continue;
    DType dt = t.dtype();
    if (t.is_wrapped_number() && is_floating(dt)) dt = g_default_dtype;  // Lua floats: default dtype
    auto& slot = t.is_wrapped_number() ? wrapped_t : t.dim() == 0 ? zero_t : dim_t;
    slot = slot ? promote_types(*slot, dt) : dt;
  }
  return combine_categories(dim_t, combine_categories(zero_t, wrapped_t)).value_or(g_default_dtype);
}

DType default_dtype() { return g_default_dtype; }
void set_default_dtype(DType t) {
  TC_CHECK(is_floating(t), DTypeError, "default dtype must be a floating type, got %s", dtype_name(t));
  g_default_dtype = t;
}
Device default_device() { return g_default_device; }
void set_default_device(Device d) { g_default_device = d; }

}  // namespace tc
