// Hand-built loop-IR kernels for the CPU code generator's tests, and a way to compile and run one.
//
//   KernelBuilder b;
//   Val n = b.pre(b.size(0));                     // preamble: size parameter 0
//   b.k.outer = {n};
//   Val i = b.outer(0);
//   Val x = b.load(0, i, Ty::F32);
//   b.code({i, x, y = b.math(ScalarOp::exp, Ty::F32, x)}, {{1, i, y}});
//   CompiledKernel fn = compile_one(b.k);
#pragma once
#include <cstdlib>
#include <vector>

#include "cpu/compile.h"

namespace tc::backends::cpu::test {

using lower::Instr;
using lower::Opc;
using lower::ReduceOp;
using lower::ScalarOp;
using lower::Stmt;
using lower::Ty;
using lower::Val;

struct KernelBuilder {
  lower::Kernel k;

  Val add(Instr in) {
    k.instrs.push_back(in);
    return (Val)k.instrs.size() - 1;
  }
  Val ci(int64_t v, Ty t = Ty::I64) { return add({.op = Opc::ConstI, .ty = t, .i = v}); }
  Val cf(double v, Ty t = Ty::F32) { return add({.op = Opc::ConstF, .ty = t, .f = v}); }
  Val size(int p) {
    k.num_size_params = std::max(k.num_size_params, p + 1);
    return add({.op = Opc::SizeParam, .ty = Ty::I64, .a = p});
  }
  Val outer(int d) { return add({.op = Opc::OuterVar, .ty = Ty::I64, .a = d}); }
  Val loop_var(int d) { return add({.op = Opc::LoopVar, .ty = Ty::I64, .a = d}); }
  Val load(int buf, Val index, Ty t) { return add({.op = Opc::Load, .ty = t, .a = buf, .b = index}); }
  Val math(ScalarOp op, Ty t, Val a, Val b = lower::kNoVal, Val c = lower::kNoVal) {
    return add({.op = Opc::Math, .ty = t, .sop = op, .a = a, .b = b, .c = c});
  }
  Val acc(int reduction, Ty t, int value = 0) { return add({.op = Opc::Acc, .ty = t, .a = reduction, .b = value}); }
  int buffer(DType d, bool written) {
    k.buffers.push_back({d, written});
    return (int)k.buffers.size() - 1;
  }
  // Adds a value to the preamble and returns it.
  Val pre(Val v) {
    k.preamble.push_back(v);
    return v;
  }
  void code(std::vector<Val> body, std::vector<lower::Store> stores) {
    Stmt s;
    s.body = std::move(body);
    s.stores = std::move(stores);
    k.body.push_back(std::move(s));
  }
  void loop(std::vector<Val> extents, std::vector<Val> body, std::vector<lower::Reduction> reductions,
            std::vector<lower::Store> stores = {}) {
    Stmt s;
    s.kind = Stmt::Kind::Loop;
    s.extents = std::move(extents);
    s.body = std::move(body);
    s.reductions = std::move(reductions);
    s.stores = std::move(stores);
    k.body.push_back(std::move(s));
  }
};

inline DType dtype_of(Ty t) {
  switch (t) {
    case Ty::Bool: return DType::Bool;
    case Ty::I32: return DType::Int32;
    case Ty::I64: return DType::Int64;
    case Ty::F32: return DType::Float32;
    case Ty::F64: return DType::Float64;
  }
  return DType::Float32;
}

// y = softmax(x) over the rows of a contiguous float32 [size 0, size 1] as one kernel:
// Loop{max}, Loop{sum exp(x - max)}, Loop{store exp(x - max) / sum}.
inline lower::Kernel softmax_rows() {
  KernelBuilder b;
  b.buffer(DType::Float32, false);
  b.buffer(DType::Float32, true);
  Val rows = b.pre(b.size(0)), cols = b.pre(b.size(1));
  b.k.name = "k0_softmax";
  b.k.outer = {rows};
  Val r = b.outer(0);
  Val base = b.math(ScalarOp::mul, Ty::I64, r, cols);
  b.code({r, base}, {});
  auto row_load = [&](std::vector<Val>& body) {
    Val j = b.loop_var(0), i = b.math(ScalarOp::add, Ty::I64, base, j), x = b.load(0, i, Ty::F32);
    body.insert(body.end(), {j, i, x});
    return std::make_pair(i, x);
  };
  std::vector<Val> b1;
  Val x1 = row_load(b1).second;
  Val mx = b.acc(0, Ty::F32);
  b.loop({cols}, b1, {{ReduceOp::Max, x1, lower::kNoVal, mx}});
  std::vector<Val> b2;
  Val x2 = row_load(b2).second;
  Val e2 = b.math(ScalarOp::exp, Ty::F32, b.math(ScalarOp::sub, Ty::F32, x2, mx));
  b2.insert(b2.end(), {e2 - 1, e2});
  Val sum = b.acc(0, Ty::F32);
  b.loop({cols}, b2, {{ReduceOp::Sum, e2, lower::kNoVal, sum}});
  std::vector<Val> b3;
  auto [i3, x3] = row_load(b3);
  Val e3 = b.math(ScalarOp::exp, Ty::F32, b.math(ScalarOp::sub, Ty::F32, x3, mx));
  Val y = b.math(ScalarOp::div, Ty::F32, e3, sum);
  b3.insert(b3.end(), {e3 - 1, e3, y});
  b.loop({cols}, b3, {}, {{1, i3, y}});
  return b.k;
}

// Compiles kernels as one graph's module (no steps) and returns them in order.
inline std::vector<CompiledKernel> compile_all(const std::vector<lower::Kernel>& ks) {
  lower::LoweredGraph g;
  g.kernels = ks;
  return compile_lowered(g).kernels;
}
inline CompiledKernel compile_one(const lower::Kernel& k) { return compile_all({k})[0]; }

// Tests run without the disk cache unless they set TC_CACHE_DIR themselves.
inline void disk_cache_off() { setenv("TC_CACHE_DIR", "", 1); }

}  // namespace tc::backends::cpu::test
