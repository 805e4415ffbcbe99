// The scalar primitives of the loop IR (scalar_ops.def) as LLVM IR, with eager's semantics for
// every compute type: what codegen.cpp calls for each Math instruction, cast, load and store.
#pragma once
#include <llvm/IR/IRBuilder.h>

#include <cmath>
#include <unordered_map>
#include <utility>

#include "lower/loop_ir.h"

namespace tc::backends::cpu {

class ScalarMath {
 public:
  // `permute_tables`: a lookup in a 16-entry constant table becomes a register permute once the
  // loop is vectorized (avx512_rewrites.h), so sigmoid reduces its exp with one.
  ScalarMath(llvm::IRBuilder<>& b, llvm::Module& m, bool permute_tables)
      : b_(b), m_(m), permute_tables_(permute_tables) {}

  llvm::Type* type(lower::Ty t);
  // Conversion between compute types as eager's casts do (float -> int truncates, x -> Bool is
  // "nonzero", NaN included).
  llvm::Value* cast(llvm::Value* v, lower::Ty from, lower::Ty to);
  // `op` on args of types `tys`, giving `result`. `const_b`: the second operand's constant when
  // it is one (pow special-cases exponents 2, 3, 0.5 and -1 as eager does).
  llvm::Value* op(lower::ScalarOp op, lower::Ty result, const std::vector<llvm::Value*>& args,
                  const std::vector<lower::Ty>& tys, const double* const_b);
  // Memory <-> compute type: float16 through LLVM half, bfloat16 as the top half of a float32
  // (stores rounded to nearest even), uint8 zero-extended, bool as a byte.
  llvm::Value* load(llvm::Value* ptr, DType d);
  void store(llvm::Value* v, lower::Ty from, llvm::Value* ptr, DType d);
  // A value in memory's form (d) to its computing type, and back (what load and store convert).
  llvm::Value* from_memory(llvm::Value* v, DType d);
  llvm::Value* to_memory(llvm::Value* v, lower::Ty from, DType d);
  llvm::Type* memory_type(DType d);

 private:
  // What the kernel's own operations promise of a float value, NaN aside: lo <= v <= hi (constants,
  // relu and other clamps, sigmoid, tanh, abs, sums and products of those); unknown values are
  // (-inf, inf). sigmoid and tanh leave out the clamps and range-reduction parts that their
  // input's range does not need.
  struct Range {
    double lo = -INFINITY, hi = INFINITY;
  };
  Range range(llvm::Value* v) const;
  void note_range(lower::ScalarOp op, const std::vector<llvm::Value*>& a, llvm::Value* r);
  llvm::Value* unary(lower::ScalarOp op, lower::Ty t, llvm::Value* x);
  llvm::Value* binary(lower::ScalarOp op, lower::Ty t, llvm::Value* x, llvm::Value* y, const double* const_b);
  llvm::Value* libm(const char* f32_name, const char* f64_name, lower::Ty t, llvm::Value* x);
  llvm::Value* exp_f32(llvm::Value* x);
  llvm::Value* min_keep_nan(llvm::Value* x, float c);
  llvm::Value* max_keep_nan(llvm::Value* x, float c);
  llvm::Value* tanh_f32(llvm::Value* x);
  llvm::Value* sigmoid_f32(llvm::Value* x);
  llvm::Value* sigmoid_divisor_table(llvm::Value* c, bool narrow);
  llvm::Value* table_lookup(const char* name, llvm::Constant* table, llvm::Value* index);
  llvm::Value* add_constant(llvm::Value* x, llvm::ConstantFP* k);
  llvm::Value* div_finite(llvm::Value* num, llvm::Value* den);
  llvm::Value* log_f32(llvm::Value* x, bool base2);
  llvm::Value* log1p_f32(llvm::Value* x);
  llvm::Value* expm1_f32(llvm::Value* x);
  llvm::Value* erf_f32(llvm::Value* x);
  llvm::Value* poly(llvm::Value* x, std::initializer_list<float> coefs);  // Horner, c0 first
  llvm::Value* poly_pairs(llvm::Value* x, llvm::Value* x2, std::initializer_list<float> coefs);
  llvm::Value* fma(llvm::Value* a, llvm::Value* b, llvm::Value* c);       // llvm.fmuladd
  llvm::Value* contractible(llvm::Value* v);
  llvm::Value* fconst(float v);
  llvm::Value* int_div(lower::ScalarOp op, llvm::Value* x, llvm::Value* y);
  llvm::Value* float_div_floor(llvm::Value* x, llvm::Value* y);
  llvm::Value* int_pow(llvm::Value* x, llvm::Value* y);
  llvm::Value* cf(lower::Ty t, double v);
  llvm::Value* ci(lower::Ty t, int64_t v);

  llvm::IRBuilder<>& b_;
  llvm::Module& m_;
  const bool permute_tables_;
  std::unordered_map<llvm::Value*, Range> ranges_;
  // tanh's result c * ratio by its factors, so that a graph add or sub of it is one fused
  // multiply-add (tanh's value is then not rounded before the add: closer to float64, not further).
  std::unordered_map<llvm::Value*, std::pair<llvm::Value*, llvm::Value*>> open_products_;
};

bool is_float(lower::Ty t);

}  // namespace tc::backends::cpu
