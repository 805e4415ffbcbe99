// Every op against PyTorch: runs the cases of tests/fixtures/*.json (written by the gen_*.py
// generators with PyTorch 1.13) through bind+call and compares shapes, dtypes and values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tc/ops.h"

using json = nlohmann::json;
using namespace tc;

namespace {

double num(const json& v) {
  if (v.is_string()) {
    std::string s = v;
    if (s == "nan") return NAN;
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}

Tensor make_tensor(const json& j) {
  DType dt;
  EXPECT_TRUE(dtype_from_name(j["dtype"].get<std::string>(), &dt));
  Shape shape = j["shape"].get<Shape>();
  const json& st = j["storage"];
  Tensor base = Tensor::empty({(int64_t)st.size()}, dt);
  visit_dtype(dt, [&]<typename T>() {
    for (size_t i = 0; i < st.size(); i++) base.data<T>()[i] = static_cast<T>(static_cast<opmath_t<T>>(num(st[i])));
  });
  if (!j.contains("strides")) return base.as_strided(shape, contiguous_strides(shape), 0);
  return base.as_strided(shape, j["strides"].get<Shape>(), j.value("offset", 0));
}

Value make_arg(const json& a) {
  if (a.contains("tensor")) return make_tensor(a["tensor"]);
  if (a.contains("tensors")) {
    TensorList l;
    for (auto& t : a["tensors"]) l.push_back(make_tensor(t));
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
  ADD_FAILURE() << "unknown fixture argument " << a.dump();
  return Value();
}

// Returns "" if `got` matches the expected output, else a description of the difference.
std::string compare(const Tensor& got, const json& want, double atol, double rtol) {
  DType dt;
  dtype_from_name(want["dtype"].get<std::string>(), &dt);
  if (got.dtype() != dt) return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(dt);
  Shape shape = want["shape"].get<Shape>();
  if (got.sizes() != shape) return "shape " + shape_string(got.sizes()) + ", expected " + shape_string(shape);
  Tensor g = got.to(DType::Float64).contiguous();
  const json& st = want["storage"];
  for (size_t i = 0; i < st.size(); i++) {
    double a = g.data<double>()[i], b = num(st[i]);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(b) && a == b) continue;
    double tol = is_floating(dt) ? atol + rtol * std::fabs(b) : 0;
    if (!(std::fabs(a - b) <= tol))
      return "element " + std::to_string(i) + ": got " + std::to_string(a) + ", expected " + std::to_string(b);
  }
  return "";
}

std::string run_case(const json& c) {
  auto op = op_from_name(c["op"].get<std::string>());
  if (!op) return "unknown op";
  Stack pos;
  for (auto& a : c["args"]) pos.push_back(make_arg(a));
  std::vector<std::pair<std::string, Value>> kw;
  for (auto& [k, v] : c["kwargs"].items()) kw.emplace_back(k, make_arg(v));
  Stack out;
  try {
    out = call(*op, bind(*op, pos, kw));
  } catch (const Error& e) {
    if (c.contains("error") && c["error"] == error_kind_name(e.kind())) return "";
    return std::string("raised ") + error_kind_name(e.kind()) + ": " + e.what();
  }
  if (c.contains("error")) return "expected " + c["error"].get<std::string>() + ", got a result";
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
    std::string d = compare(got[i], want[i], c["atol"], c["rtol"]);
    if (!d.empty()) return "output " + std::to_string(i + 1) + ": " + d;
  }
  return "";
}

class OpsMatchPytorch : public testing::TestWithParam<std::string> {};

TEST_P(OpsMatchPytorch, AllCasesOfGroup) {
  std::ifstream f(GetParam());
  json j = json::parse(f);
  int passed = 0, failed = 0;
  for (auto& c : j["cases"]) {
    std::string err = run_case(c);
    if (err.empty()) {
      passed++;
    } else {
      failed++;
      ADD_FAILURE() << c["name"].get<std::string>() << ": " << err;
    }
  }
  printf("%s: %d passed, %d failed\n", GetParam().c_str(), passed, failed);
  EXPECT_GT(passed, 0);
}

std::vector<std::string> fixture_files() {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(TC_SOURCE_DIR "/tests/fixtures"))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpsMatchPytorch, testing::ValuesIn(fixture_files()),
                         [](const auto& info) { return std::filesystem::path(info.param).stem().string(); });

}  // namespace
