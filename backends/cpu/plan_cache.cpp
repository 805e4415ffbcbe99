// Lowered graphs in the disk cache (plan_cache.h).
#include "plan_cache.h"

#include <sys/stat.h>

#include <bit>
#include <cstdio>

#include "disk_cache.h"
#include "lower/lowered_json.h"
#include "plan_format.h"
#include "tc/error.h"

namespace tc::backends::cpu {
namespace {


constexpr const char* kKind = "cpu-plan";
constexpr int kPlanFormat = 3;  // bump when the stored form (plan_format.h) or what lowering reads changes

// This build of tc: lowering may change between builds of one version, so a plan is only trusted
// by the executable that wrote it (its size and modification time).
std::string build_id() {
  static const std::string id = [] {
    struct stat st;
    if (stat("/proc/self/exe", &st) != 0) return std::string();
    return std::to_string((long long)st.st_size) + "." + std::to_string((long long)st.st_mtim.tv_sec) + "." +
           std::to_string((long long)st.st_mtim.tv_nsec);
  }();
  return id;
}

// The key is written straight into a string (it is built on every compile of a graph, warm
// starts included: nlohmann::json's small allocations cost more than the lowering they save).
struct KeyWriter {
  std::string out;
  KeyWriter& operator<<(int64_t v) {
    out += std::to_string(v);
    out += ' ';
    return *this;
  }
  KeyWriter& operator<<(const std::string& s) {
    out += std::to_string(s.size());  // length-prefixed: no separator can be forged
    out += ':';
    out += s;
    return *this;
  }
  KeyWriter& operator<<(const char* s) { return *this << std::string(s); }
  KeyWriter& operator<<(const std::vector<int64_t>& v) {
    *this << (int64_t)v.size();
    for (int64_t x : v) *this << x;
    return *this;
  }
  void tensor_meta(const Tensor& t) {
    *this << dtype_name(t.dtype()) << t.sizes() << t.strides() << t.offset() << t.device().str()
          << (int64_t)t.is_wrapped_number();
  }
  void ref(const capture::Ref& r) { *this << (int64_t)r.node << (int64_t)r.out << (int64_t)r.elem; }
  // Numbers, lists, strings, dtypes and devices as they are; tensors (constants: small, with their
  // data) through lowered_json's form, which throws NotImplementedError for large ones.
  void value(const Value& v) {
    if (v.is_none()) *this << "none";
    else if (v.is_bool()) *this << "b" << (int64_t)v.to_bool();
    else if (v.is_int()) *this << "i" << v.to_int();
    else if (v.is_double()) *this << "f" << std::bit_cast<int64_t>(v.to_double());
    else if (v.is_int_list()) *this << "il" << v.ints();
    else if (v.is_float_list()) {
      *this << "fl" << (int64_t)v.floats().size();
      for (double d : v.floats()) *this << std::bit_cast<int64_t>(d);
    } else if (v.is_string()) *this << "s" << v.str();
    else if (v.is_dtype()) *this << "dtype" << dtype_name(v.dtype());
    else if (v.is_device()) *this << "device" << v.device().str();
    else *this << "json" << lower::value_to_json(v).dump();
  }
};

}  // namespace

std::string plan_key(const capture::Graph& g) {
  const std::string id = build_id();
  if (id.empty()) return "";
  KeyWriter k;
  k << (std::string("tc ") + TC_VERSION + " plan " + std::to_string(kPlanFormat) + " build " + id);
  try {
    for (const capture::Node& n : g.nodes) {
      if (n.kind == capture::NodeKind::External) return "";
      k << (int64_t)n.kind << (n.kind == capture::NodeKind::Op ? op_name(n.op) : "") << n.name << (int64_t)n.line
        << (int64_t)n.no_grad << (int64_t)n.args.size();
      for (const capture::NodeArg& a : n.args) {
        k << (int64_t)a.kind;
        if (a.kind == capture::NodeArg::Kind::Const) k.value(a.constant);
        k << (int64_t)a.refs.size();
        for (const capture::Ref& r : a.refs) k.ref(r);
      }
      k << (int64_t)n.fakes.size();
      for (const Value& v : n.fakes) {
        if (v.is_tensor()) {
          k << "t";
          k.tensor_meta(v.tensor());
        } else if (v.is_tensor_list()) {
          k << "tl" << (int64_t)v.tensors().size();
          for (const Tensor& t : v.tensors()) k.tensor_meta(t);
        } else {
          k.value(v);
        }
      }
    }
  } catch (const Error&) {  // a constant that cannot be stored (a large tensor)
    return "";
  }
  k << "inputs" << (int64_t)g.inputs.size();
  for (int i : g.inputs) k << (int64_t)i;
  k << "outputs" << (int64_t)g.outputs.size();
  for (const capture::Ref& r : g.outputs) k.ref(r);
  k << "dynamic" << (int64_t)g.dynamic_dims.size();
  for (const auto& [i, d] : g.dynamic_dims) k << (int64_t)i << (int64_t)d;
  return std::move(k.out);
}

std::optional<lower::LoweredGraph> read_plan(const std::string& key, bool* rejected) {
  *rejected = false;
  std::string text;
  switch (cache_read(key, &text, kKind)) {
    case CacheRead::Miss: return std::nullopt;
    case CacheRead::Rejected: *rejected = true; return std::nullopt;
    case CacheRead::Hit: break;
  }
  try {
    return decode_plan(text);
  } catch (const std::exception& e) {  // tc::Error, std::bad_alloc: a valid entry we cannot read
    std::fprintf(stderr, "tc: cpu-plan kernel cache: discarding %s (%s); it will be rebuilt\n",
                 cache_path(key, kKind).c_str(), e.what());
    std::remove(cache_path(key, kKind).c_str());
    *rejected = true;
    return std::nullopt;
  }
}

void write_plan(const std::string& key, const lower::LoweredGraph& lg) {
  if (key.empty() || !lg.index_checks.empty()) return;
  std::string bytes;
  try {
    bytes = encode_plan(lg);
  } catch (const Error&) {  // External steps, large constants
    return;
  }
  cache_write(key, bytes, kKind);
}

}  // namespace tc::backends::cpu
