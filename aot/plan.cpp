// JSON forms of the manifest and the launch list (plan.h).
#include "plan.h"

#include "tc/error.h"

namespace tc::aot {

using nlohmann::json;

namespace {

using lower::dtype_from_json;

json spec_to_json(const TensorSpec& s) {
  json j = {{"name", s.name}, {"dtype", dtype_name(s.dtype)}, {"shape", s.shape}, {"dynamic", s.dynamic}};
  if (!s.ranges.empty()) j["ranges"] = s.ranges;
  return j;
}
TensorSpec spec_from_json(const json& j) {
  TensorSpec s;
  s.name = j["name"].get<std::string>();
  s.dtype = dtype_from_json(j["dtype"]);
  s.shape = j["shape"].get<std::vector<int64_t>>();
  s.dynamic = j["dynamic"].get<std::vector<int>>();
  if (j.contains("ranges")) s.ranges = j["ranges"].get<std::vector<std::array<int64_t, 3>>>();
  return s;
}
json specs_to_json(const std::vector<TensorSpec>& v) {
  json a = json::array();
  for (const auto& s : v) a.push_back(spec_to_json(s));
  return a;
}
std::vector<TensorSpec> specs_from_json(const json& j) {
  std::vector<TensorSpec> v;
  for (const json& x : j) v.push_back(spec_from_json(x));
  return v;
}

// json's own exceptions (a missing field, a wrong type) become ValueErrors naming the document.
template <typename F>
auto parsing(const char* what, F&& f) {
  try {
    return f();
  } catch (const json::exception& e) {
    TC_FAIL(ValueError, "tc.aot.load: the package's %s is malformed: %s", what, e.what());
  }
}

}  // namespace

std::string TensorSpec::str() const {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); i++) {
    bool dyn = false;
    for (int d : dynamic) dyn |= d == (int)i;
    std::string dim = dyn ? "s" + std::to_string(i) : std::to_string(shape[i]);
    for (const auto& [d, lo, hi] : ranges)
      if (d == int64_t(i)) dim = std::to_string(lo) + ".." + std::to_string(hi);
    s += (i ? ", " : "") + dim;
  }
  return s + "]";
}

json manifest_to_json(const Manifest& m) {
  return {{"format_version", m.format_version},
          {"tc_version", m.tc_version},
          {"device", m.device},
          {"target", m.target},
          {"inputs", specs_to_json(m.inputs)},
          {"outputs", specs_to_json(m.outputs)},
          {"constants", specs_to_json(m.constants)},
          {"constants_packaged", m.constants_packaged},
          {"code", m.code}};
}

Manifest manifest_from_json(const json& j) {
  return parsing("manifest", [&] {
    Manifest m;
    m.format_version = j["format_version"].get<uint32_t>();
    m.tc_version = j["tc_version"].get<std::string>();
    m.device = j["device"].get<std::string>();
    m.target = j["target"].get<std::string>();
    m.inputs = specs_from_json(j["inputs"]);
    m.outputs = specs_from_json(j["outputs"]);
    m.constants = specs_from_json(j["constants"]);
    m.constants_packaged = j["constants_packaged"].get<bool>();
    m.code = j["code"].get<std::string>();
    return m;
  });
}

json plan_to_json(const lower::LoweredGraph& g, const std::vector<GraphInput>& inputs,
                  const std::vector<json>& kernel_code, const json& code, const LibraryCalls& calls) {
  json j = lower::lowered_to_json(g, calls);
  j["code"] = code;
  json ins = json::array();
  for (const GraphInput& in : inputs) ins.push_back({{in.constant ? "constant" : "arg", in.index}});
  j["graph_inputs"] = ins;
  for (size_t i = 0; i < g.kernels.size(); i++) j["kernels"][i]["code"] = kernel_code.at(i);
  return j;
}

void plan_from_json(const json& j, lower::LoweredGraph* g, std::vector<GraphInput>* inputs,
                    std::vector<json>* kernel_code, json* code, const LibraryCalls& calls) {
  parsing("plan", [&] {
    *code = j.at("code");
    for (const json& in : j["graph_inputs"]) {
      const bool c = in.contains("constant");
      inputs->push_back({c, in[c ? "constant" : "arg"].get<int>()});
    }
    lower::lowered_from_json(j, g, calls);
    for (const json& k : j["kernels"]) kernel_code->push_back(k["code"]);
    return 0;
  });
}

}  // namespace tc::aot
