// The fixture format (tests/fixtures/*.json, written by tests/fixtures/gen_*.py) and its runner,
// with every tensor argument optionally moved to a CUDA device (strides and offsets kept: the view is
// rebuilt over a device copy of the whole storage).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tc/ops.h"

namespace tc::fixture {

using json = nlohmann::json;

inline double num(const json& v) {
  if (v.is_string()) {
    std::string s = v;
    if (s == "nan") return NAN;
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}

inline Tensor make_tensor(const json& j, Device dev) {
  DType dt;
  EXPECT_TRUE(dtype_from_name(j["dtype"].get<std::string>(), &dt));
  Shape shape = j["shape"].get<Shape>();
  const json& st = j["storage"];
  Tensor base = Tensor::empty({(int64_t)st.size()}, dt);
  visit_dtype(dt, [&]<typename T>() {
    for (size_t i = 0; i < st.size(); i++) base.data<T>()[i] = static_cast<T>(static_cast<opmath_t<T>>(num(st[i])));
  });
  if (!dev.is_cpu()) {
    Tensor d = Tensor::empty(base.sizes(), dt, dev);
    d.copy_from(base);
    base = d;
  }
  if (!j.contains("strides")) return base.as_strided(shape, contiguous_strides(shape), 0);
  return base.as_strided(shape, j["strides"].get<Shape>(), j.value("offset", 0));
}

inline Value make_arg(const json& a, Device dev) {
  if (a.contains("tensor")) return make_tensor(a["tensor"], dev);
  if (a.contains("tensors")) {
    TensorList l;
    for (auto& t : a["tensors"]) l.push_back(make_tensor(t, dev));
    return l;
  }
  if (a.contains("none")) return Value();
  if (a.contains("bool")) return Value(a["bool"].get<bool>());
  if (a.contains("int")) return Value(a["int"].get<int64_t>());
  if (a.contains("float")) return Value(num(a["float"]));
  if (a.contains("str")) return Value(a["str"].get<std::string>());
  if (a.contains("ints")) return Value(a["ints"].get<IntList>());
  if (a.contains("floats")) {
    FloatList l;
    for (auto& v : a["floats"]) l.push_back(num(v));
    return l;
  }
  if (a.contains("dtype")) {
    DType dt;
    EXPECT_TRUE(dtype_from_name(a["dtype"].get<std::string>(), &dt));
    return Value(dt);
  }
  if (a.contains("device")) return Value(Device::parse(a["device"].get<std::string>()));
  ADD_FAILURE() << "unknown fixture argument " << a.dump();
  return Value();
}

// "" if `got` matches the expected output, else a description of the difference.
inline std::string compare(const Tensor& got, const json& want, double atol, double rtol) {
  DType dt;
  dtype_from_name(want["dtype"].get<std::string>(), &dt);
  if (got.dtype() != dt) return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(dt);
  Shape shape = want["shape"].get<Shape>();
  if (got.sizes() != shape) return "shape " + shape_string(got.sizes()) + ", expected " + shape_string(shape);
  Tensor h = Tensor::empty(got.sizes(), DType::Float64);
  h.copy_from(got);
  const json& st = want["storage"];
  for (size_t i = 0; i < st.size(); i++) {
    double a = h.data<double>()[i], b = num(st[i]);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(b) && a == b) continue;
    double tol = is_floating(dt) ? atol + rtol * std::fabs(b) : 0;
    if (!(std::fabs(a - b) <= tol))
      return "element " + std::to_string(i) + ": got " + std::to_string(a) + ", expected " + std::to_string(b);
  }
  return "";
}

// Runs one case with tensors on `dev`; `check_values` false only checks that it ran.
// Devices in the case's keyword arguments ("device") are replaced by `dev` too.
inline std::string run_case(const json& c, Device dev, bool check_values, std::string* kind = nullptr) {
  auto op = op_from_name(c["op"].get<std::string>());
  if (!op) return "unknown op";
  Stack pos;
  for (auto& a : c["args"]) pos.push_back(make_arg(a, dev));
  std::vector<std::pair<std::string, Value>> kw;
  for (auto& [k, v] : c["kwargs"].items()) kw.emplace_back(k, make_arg(v, dev));
  // Creation ops: make the result live on dev.
  const OpSchema& s = schema(*op);
  bool has_device_arg = false;
  for (auto& a : s.args) has_device_arg |= a.type == ArgType::Device && a.kwonly;
  if (has_device_arg && !dev.is_cpu()) {
    bool given = false;
    for (auto& [k, v] : kw)
      if (k == "device") {
        v = Value(dev);
        given = true;
      }
    if (!given) kw.emplace_back("device", Value(dev));
  }
  Stack out;
  try {
    out = call(*op, bind(*op, pos, kw));
  } catch (const Error& e) {
    if (kind) *kind = error_kind_name(e.kind());
    if (c.contains("error") && c["error"] == error_kind_name(e.kind())) return "";
    return std::string("raised ") + error_kind_name(e.kind()) + ": " + e.what();
  }
  if (c.contains("error")) return check_values ? "expected " + c["error"].get<std::string>() + ", got a result" : "";
  if (!check_values) return "";
  std::vector<Tensor> got;
  for (auto& v : out) {
    if (v.is_tensor()) got.push_back(v.tensor());
    if (v.is_tensor_list())
      for (auto& t : v.tensors()) got.push_back(t);
  }
  const json& want = c["out"];
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (!dev.is_cpu() && *op != Op::to_device && !got[i].device().is_cuda() && got[i].dim() > 0)
      return "output " + std::to_string(i + 1) + " is on " + got[i].device().str();
    std::string d = compare(got[i], want[i], c["atol"], c["rtol"]);
    if (!d.empty()) return "output " + std::to_string(i + 1) + ": " + d;
  }
  return "";
}

inline std::vector<std::string> fixture_files() {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(TC_SOURCE_DIR "/tests/fixtures"))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tc::fixture
