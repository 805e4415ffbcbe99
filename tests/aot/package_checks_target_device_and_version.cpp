// What tc::aot::Package::load checks beyond the container (bad_packages_are_refused.lua covers
// the bytes): the manifest's device (a CUDA package on a machine without a GPU), the CPU the
// object code was compiled for (features this CPU lacks, another architecture) and the tc
// version. Packages are made with compile_package from a hand-built graph, then re-written with
// a forged manifest (valid checksums, so only the manifest check can refuse them).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "../backends/graph_node.h"
#include "compile.h"
#include "container.h"
#include "lower/lower.h"
#include "plan.h"
#include "tc/aot.h"
#include "tc/cuda.h"

namespace tc::aot {

using backends::testing::node;

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tc-aot-gtest-" + std::to_string(getpid()) + "-" + name)).string();
}

// y = relu(x * w + 1): x an input, w a constant.
std::string make_package(const std::string& name) {
  capture::Graph g;
  // (one fake per input: lowering tells values apart by their fake tensors)
  capture::Ref x = g.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32));
  capture::Ref w = g.add_input("w", "arg[2].w", Tensor::fake({4}, {1}, DType::Float32));
  capture::Ref m = node(g, Op::mul, {x, w})[0];
  capture::Ref a = node(g, Op::add, {m, Value(1.0)})[0];
  g.outputs.push_back(node(g, Op::relu, {a})[0]);
  ExportSpec spec;
  spec.graph_inputs = {{false, 0}, {true, 0}};
  spec.input_names = {"x"};
  spec.constant_names = {"w"};
  AotOptions o;
  o.path = tmp_path(name);
  compile_package(g, spec, o);
  return o.path;
}

// Rewrites the package with manifest field `key` set to `value`.
std::string forge(const std::string& path, const std::string& key, const std::string& value) {
  std::vector<Section> s = read_container(path);
  for (Section& sec : s)
    if (sec.name == "manifest") {
      nlohmann::json j = nlohmann::json::parse(sec.data);
      j[key] = value;
      sec.data = j.dump();
    }
  std::string out = path + ".forged";
  write_container(out, s);
  return out;
}

std::string load_error(const std::string& path) {
  try {
    Package::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The plan's JSON carries the whole lowered graph: reductions (softmax, argmax with its value),
// a library call with constants, dynamic sizes; what is read back writes the same JSON again and
// every kernel has the same structure (the CUDA runtime computes launch geometry from it).
TEST(AotPackage, PlanRoundTripsTheLoweredGraph) {
  capture::Graph g;
  capture::Ref x = g.add_input("x", "arg[1]", Tensor::fake({4, 6}, {6, 1}, DType::Float32));
  capture::Ref w = g.add_input("w", "arg[2].w", Tensor::fake({6, 3}, {3, 1}, DType::Float32));
  g.dynamic_dims.push_back({0, 0});
  capture::Ref s = node(g, Op::softmax, {x, Value(int64_t(-1))})[0];
  capture::Ref m = node(g, Op::mm, {s, w})[0];
  capture::Ref a = node(g, Op::argmax, {m, Value(int64_t(-1))})[0];
  capture::Ref t = node(g, Op::sum, {node(g, Op::mul, {m, Value(0.5)})[0], Value(IntList{-1})})[0];
  g.outputs = {a, t, m};
  lower::LoweredGraph lg = lower::lower(g, {});
  ASSERT_FALSE(lg.symbols.empty());
  std::vector<nlohmann::json> code;
  for (size_t i = 0; i < lg.kernels.size(); i++) code.push_back({{"symbol", "k" + std::to_string(i)}});
  std::vector<GraphInput> inputs = {{false, 0}, {true, 0}};
  nlohmann::json j = plan_to_json(lg, inputs, code, nullptr, nullptr);
  lower::LoweredGraph back;
  std::vector<GraphInput> back_inputs;
  std::vector<nlohmann::json> back_code;
  nlohmann::json back_graph_code;
  plan_from_json(nlohmann::json::parse(j.dump()), &back, &back_inputs, &back_code, &back_graph_code, nullptr);
  EXPECT_EQ(plan_to_json(back, back_inputs, back_code, back_graph_code, nullptr).dump(), j.dump());
  ASSERT_EQ(back.kernels.size(), lg.kernels.size());
  for (size_t i = 0; i < lg.kernels.size(); i++) EXPECT_TRUE(back.kernels[i].same_structure(lg.kernels[i])) << i;
  EXPECT_EQ(lower::print(back), lower::print(lg));
}

TEST(AotPackage, RunsAndChecksConstants) {
  std::string path = make_package("ok");
  Package p = Package::load(path);
  EXPECT_EQ(p.manifest().inputs.at(0).str(), "float32[4]");
  EXPECT_EQ(p.constant_names(), std::vector<std::string>{"w"});
  Tensor x = call1(Op::arange, {Value(int64_t(-2)), Value(int64_t(2))}, {{"dtype", Value(DType::Float32)}});
  Tensor w = call1(Op::full, {Value(IntList{4}), Value(3.0)});
  EXPECT_THROW(p.run({x}), Error);  // w unbound
  p.load_constants({{"w", w}});
  Tensor y = p.run({x})[0];
  const float* d = static_cast<const float*>(y.data_ptr());
  EXPECT_EQ(std::vector<float>(d, d + 4), (std::vector<float>{0, 0, 1, 4}));  // relu(3x + 1), x = -2..1
  // copies share the program and keep their own constants
  Package q = p;
  q.load_constants({{"w", call1(Op::full, {Value(IntList{4}), Value(1.0)})}});
  EXPECT_EQ(static_cast<const float*>(p.run({x})[0].data_ptr())[3], 4.0f);
  EXPECT_EQ(static_cast<const float*>(q.run({x})[0].data_ptr())[3], 2.0f);
  std::remove(path.c_str());
}

TEST(AotPackage, CudaPackageWithoutGpuIsRefused) {
#ifdef TC_HAVE_CUDA
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
#endif
  std::string path = make_package("cuda");
  std::string forged = forge(path, "device", "cuda");
  std::string e = load_error(forged);
  EXPECT_NE(e.find("is a CUDA package"), std::string::npos) << e;
  EXPECT_NE(e.find("this machine has no CUDA GPU"), std::string::npos) << e;
  std::remove(path.c_str());
  std::remove(forged.c_str());
}

TEST(AotPackage, MissingCpuFeaturesAreRefused) {
  std::string path = make_package("cpu");
  nlohmann::json j = nlohmann::json::parse(find_section(read_container(path), "manifest")->data);
  std::string target = j["target"];
  std::string forged = forge(path, "target", target + ",+tc-imaginary-feature");
  std::string e = load_error(forged);
  EXPECT_NE(e.find("this CPU"), std::string::npos) << e;
  EXPECT_NE(e.find("lacks tc-imaginary-feature"), std::string::npos) << e;
  std::string arch = forge(path, "target", "aarch64-unknown-linux-gnu cortex-a72 +neon");
  EXPECT_NE(load_error(arch).find("was compiled for aarch64-unknown-linux-gnu"), std::string::npos) << load_error(arch);
  std::string version = forge(path, "tc_version", "0.0.1");
  EXPECT_NE(load_error(version).find("was made by tc 0.0.1"), std::string::npos) << load_error(version);
  std::string device = forge(path, "device", "tpu");
  EXPECT_NE(load_error(device).find("device 'tpu'"), std::string::npos) << load_error(device);
  for (const std::string& p : {path, forged, arch, version, device}) std::remove(p.c_str());
}

}  // namespace tc::aot
