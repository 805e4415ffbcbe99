// The scalar primitives as LLVM IR. Semantics are those of tc's eager CPU kernels
// (stdlib/cpu/pointwise_*.cpp): integer arithmetic wraps, integer division never traps (a zero
// divisor gives 0 here; eager raises before running, lowering checks divisors before kernels),
// minimum/maximum propagate NaN, round is half to even, float32 exp is eager's vectorizable
// polynomial (so compiled and eager exp agree to the bit and loops over it vectorize); float32
// tanh (a rational function), log, log2, log1p, expm1, erf and sigmoid are inline polynomials too
// (a few ulp from libm's).
#include "scalar_math.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cmath>

#include "tc/error.h"

namespace tc::backends::cpu {

using lower::ScalarOp;
using lower::Ty;
using llvm::Value;

bool is_float(Ty t) { return t == Ty::F32 || t == Ty::F64; }

llvm::Type* ScalarMath::type(Ty t) {
  switch (t) {
    case Ty::Bool: return b_.getInt1Ty();
    case Ty::I32: return b_.getInt32Ty();
    case Ty::I64: return b_.getInt64Ty();
    case Ty::F32: return b_.getFloatTy();
    case Ty::F64: return b_.getDoubleTy();
  }
  TC_ASSERT(false, "unknown loop IR type");
}

Value* ScalarMath::cf(Ty t, double v) { return llvm::ConstantFP::get(type(t), v); }
Value* ScalarMath::ci(Ty t, int64_t v) { return llvm::ConstantInt::get(type(t), (uint64_t)v, true); }

Value* ScalarMath::cast(Value* v, Ty from, Ty to) {
  if (from == to) return v;
  if (to == Ty::Bool)
    return is_float(from) ? b_.CreateFCmpUNE(v, cf(from, 0)) : b_.CreateICmpNE(v, ci(from, 0));
  if (from == Ty::Bool) return is_float(to) ? b_.CreateUIToFP(v, type(to)) : b_.CreateZExt(v, type(to));
  if (is_float(from) && is_float(to)) return b_.CreateFPCast(v, type(to));
  if (is_float(to)) return b_.CreateSIToFP(v, type(to));
  // Out-of-range float -> int is poison in LLVM; freeze keeps it an (unspecified) value.
  if (is_float(from)) return b_.CreateFreeze(b_.CreateFPToSI(v, type(to)));
  return b_.CreateSExtOrTrunc(v, type(to));
}

llvm::Type* ScalarMath::memory_type(DType d) {
  switch (d) {
    case DType::Float32: return b_.getFloatTy();
    case DType::Float64: return b_.getDoubleTy();
    case DType::Float16: return b_.getHalfTy();
    case DType::BFloat16: return b_.getInt16Ty();
    case DType::Int64: return b_.getInt64Ty();
    case DType::Int32: return b_.getInt32Ty();
    case DType::UInt8: return b_.getInt8Ty();
    case DType::Bool: return b_.getInt8Ty();
  }
  TC_ASSERT(false, "unknown dtype");
}

Value* ScalarMath::load(Value* ptr, DType d) { return from_memory(b_.CreateLoad(memory_type(d), ptr), d); }

Value* ScalarMath::from_memory(Value* v, DType d) {
  switch (d) {
    case DType::Float16: return b_.CreateFPExt(v, b_.getFloatTy());
    case DType::BFloat16:
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
    case DType::UInt8: return b_.CreateZExt(v, b_.getInt32Ty());
    case DType::Bool: return b_.CreateICmpNE(v, b_.getInt8(0));
    default: return v;
  }
}

void ScalarMath::store(Value* v, Ty from, Value* ptr, DType d) { b_.CreateStore(to_memory(v, from, d), ptr); }

Value* ScalarMath::to_memory(Value* v, Ty from, DType d) {
  Value* m = nullptr;
  switch (d) {
    case DType::Float32: m = cast(v, from, Ty::F32); break;
    case DType::Float64: m = cast(v, from, Ty::F64); break;
    case DType::Float16: m = b_.CreateFPTrunc(cast(v, from, Ty::F32), b_.getHalfTy()); break;
    case DType::BFloat16: {  // as BFloat16::from_float: round to nearest even, NaN stays quiet NaN
      Value* x = b_.CreateBitCast(cast(v, from, Ty::F32), b_.getInt32Ty());
      Value* odd = b_.CreateAnd(b_.CreateLShr(x, 16), 1);
      Value* rounded = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(x, b_.getInt32(0x7fff)), odd), 16);
      Value* nan = b_.CreateICmpUGT(b_.CreateAnd(x, 0x7fffffff), b_.getInt32(0x7f800000));
      Value* quiet = b_.CreateOr(b_.CreateLShr(x, 16), 0x40);
      m = b_.CreateTrunc(b_.CreateSelect(nan, quiet, rounded), b_.getInt16Ty());
      break;
    }
    case DType::Int64: m = cast(v, from, Ty::I64); break;
    case DType::Int32: m = cast(v, from, Ty::I32); break;
    case DType::UInt8:  // floats go through int64 first, as eager (-1.5 -> 255)
      m = b_.CreateTrunc(cast(v, from, is_float(from) ? Ty::I64 : Ty::I32), b_.getInt8Ty());
      break;
    case DType::Bool: m = b_.CreateZExt(cast(v, from, Ty::Bool), b_.getInt8Ty()); break;
  }
  return m;
}

// A libm function on float32 or float64 (declared pure: tc never reads errno).
Value* ScalarMath::libm(const char* f32_name, const char* f64_name, Ty t, Value* x) {
  TC_CHECK(is_float(t), CompileError, "cpu codegen: %s of a non-float value", f64_name);
  llvm::Type* ft = type(t);
  llvm::FunctionCallee f = m_.getOrInsertFunction(t == Ty::F32 ? f32_name : f64_name, ft, ft);
  if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setDoesNotThrow();
    fn->setDoesNotAccessMemory();
    fn->setWillReturn();
  }
  return b_.CreateCall(f, {x});
}

// eager's vexp (stdlib/cpu/pointwise_unary.cpp), operation for operation.
Value* ScalarMath::exp_f32(Value* x) {
  auto f = [&](float v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); };
  llvm::Type* i32 = b_.getInt32Ty();
  Value* magic = f(12582912.0f);
  Value* t = b_.CreateFAdd(b_.CreateFMul(x, f(1.44269504088896341f)), magic);
  Value* k = b_.CreateFSub(t, magic);
  Value* ki = b_.CreateSub(b_.CreateBitCast(t, i32), b_.CreateBitCast(magic, i32));
  Value* r = b_.CreateFSub(b_.CreateFSub(x, b_.CreateFMul(k, f(0.693359375f))), b_.CreateFMul(k, f(-2.12194440e-4f)));
  Value* p = f(1.0f / 5040);
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = b_.CreateFAdd(b_.CreateFMul(p, r), f(c));
  Value* k1 = b_.CreateAShr(ki, 1);
  Value* k2 = b_.CreateSub(ki, k1);
  auto pow2 = [&](Value* e) { return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(e, b_.getInt32(127)), 23), b_.getFloatTy()); };
  Value* y = b_.CreateFMul(b_.CreateFMul(p, pow2(k1)), pow2(k2));
  y = b_.CreateSelect(b_.CreateFCmpOGT(x, f(89.0f)), f(INFINITY), y);
  y = b_.CreateSelect(b_.CreateFCmpOLT(x, f(-104.0f)), f(0.0f), y);
  return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, y);
}

// float32 transcendentals as straight-line IR (polynomials after range reduction, both sides of
// a range computed and selected where one formula does not serve), so that loops over them
// vectorize; libm's scalar calls would not. Coefficients are near-minimax fits of the reduced
// functions (relative error, rounded to float); measured against float64 libm over every 37th
// float32: log 0.8 ulp, log2 1.5, log1p 2.4, expm1 1.8, erf 2.4 (glibc's float tanh, log, log1p,
// erf: 2.1, 0.8, 0.8, 1.5); over every 97th: tanh 5.3 (a rational fit), sigmoid 2.4.
// tests/backends/cpu_scalar_ops_match_reference.cpp holds them to 3 ulp, tanh to 6.
Value* ScalarMath::fconst(float v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); }

Value* ScalarMath::poly(Value* x, std::initializer_list<float> coefs) {
  const float* c = coefs.begin();
  Value* p = fconst(c[coefs.size() - 1]);
  for (size_t i = coefs.size() - 1; i-- > 0;)
    p = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()}, {p, x, fconst(c[i])});
  return p;
}

// The same polynomial with half of Horner's dependent steps (for loops bound by one element's chain
// of latencies): pairs c[2i] + c[2i+1] x side by side, then Horner in x2 = x*x over the pairs.
Value* ScalarMath::poly_pairs(Value* x, Value* x2, std::initializer_list<float> coefs) {
  const float* c = coefs.begin();
  const size_t n = coefs.size();
  auto pair = [&](size_t i) { return i + 1 < n ? fma(fconst(c[i + 1]), x, fconst(c[i])) : fconst(c[i]); };
  size_t i = (n - 1) / 2 * 2;
  Value* p = pair(i);
  while (i > 0) {
    i -= 2;
    p = fma(p, x2, pair(i));
  }
  return p;
}

Value* ScalarMath::fma(Value* a, Value* b, Value* c) {
  return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()}, {a, b, c});
}

// min(x, c) and max(x, c) for a constant c that keep a NaN x (one minps/maxps on x86, whose NaN
// rule is "the second operand"; llvm.minnum would return c and cost a NaN fix-up).
Value* ScalarMath::min_keep_nan(Value* x, float c) {
  return b_.CreateSelect(b_.CreateFCmpOGT(x, fconst(c)), fconst(c), x);
}
Value* ScalarMath::max_keep_nan(Value* x, float c) {
  return b_.CreateSelect(b_.CreateFCmpOLT(x, fconst(c)), fconst(c), x);
}

// num / den for a den that is finite and not zero (the caller's ranges promise it): `arcp ninf`
// lets the backend use a reciprocal estimate refined by Newton steps where the target has one
// (AVX-512: vrcp14ps and one step, within an ulp; the divider was a quarter of a 10-op chain's
// cycles) and a division elsewhere.
Value* ScalarMath::div_finite(Value* num, Value* den) {
  Value* q = b_.CreateFDiv(num, den);
  llvm::FastMathFlags fmf;
  fmf.setAllowReciprocal();
  fmf.setNoInfs();
  fmf.setAllowContract();  // the Newton steps as fused multiply-adds
  llvm::cast<llvm::Instruction>(q)->setFastMathFlags(fmf);
  return q;
}

// tanh(x) = x P(x^2) / Q(x^2) for x clamped to [-9.1, 9.1] (tanh rounds to 1 from 9.01 on; NaN
// kept), P and Q of degree 4 with positive coefficients: a rational fit of tanh(x)/x in x^2 (Loeb
// iterations with Lawson weights, relative error 2.3e-8 on [0, 9.1] before rounding the
// coefficients to float). Odd by construction (x times P / Q: the sign and -0 need no copysign; a
// reciprocal estimate's Newton step would turn (-0 P) / Q into +0), no exp range reduction, one
// division: 16 vector instructions where the expm1 form (-m / (m + 2), m = expm1(-2|x|)) took 23,
// for 5.3 ulp instead of 1.9 (Horner's roundings in P and Q near tanh = 1; DESIGN.md section 4
// asks for a relative tolerance, not ulps).
// A clamp that x's range makes a no-op is left out (a NaN passes either way).
Value* ScalarMath::tanh_f32(Value* x) {
  const Range rx = range(x);
  Value* c = rx.lo < -9.1f ? max_keep_nan(x, -9.1f) : x;
  if (rx.hi > 9.1f) c = min_keep_nan(c, 9.1f);
  Value* z = b_.CreateFMul(c, c);
  Value* p = poly(z, {1.0f, 1.337440908e-01f, 3.487729467e-03f, 2.047977614e-05f, 1.317548826e-08f});
  Value* q = poly(z, {1.0f, 4.670772254e-01f, 2.584708482e-02f, 3.272783360e-04f, 7.703227425e-07f});
  Value* ratio = div_finite(p, q);
  Value* r = b_.CreateFMul(c, ratio);
  if (llvm::isa<llvm::Instruction>(r)) open_products_[r] = {c, ratio};  // not a folded constant
  return r;
}

// 1 / (1 + exp(-x)) with x clamped to c in [-87, 87] (NaN kept). -c = k ln2 - r with k =
// round(-c / ln2), |r| <= ln2/2, r = c + k ln2 (ln2 in two parts, the first exact in k ln2): t =
// -c log2(e) + 1.5*2^23 + 127 rounds k + 127 into t's low mantissa bits, so t's bits shifted left
// by 23 are 2^k's (the 1.5*2^23 part shifts out; k in [-126, 126], a normal 2^k, no overflow,
// underflow or NaN case). exp(-c) = 2^k (1 + q), q = expm1(-r) = -r + r^2 H(-r) with H a degree-4
// fit of (expm1(u) - u) / u^2 on |u| <= ln2/2 (relative error 1.3e-8), evaluated as pairs c_i +
// c_(i+1) r combined by Horner in r^2 (half of Horner's dependent steps). -r instead of r keeps
// the negation inside the fused multiply-adds: LLVM pushes a negation of the clamp into its
// selects, which then no longer match minps/maxps. The divisor 1 + 2^k (1 + q) = 2^k q + (2^k + 1)
// is one fused multiply-add (2^k q is exact), at least 1, at most e^87, so its reciprocal is a
// normal float (a reciprocal estimate may flush subnormal results). Beyond the clamp the result is
// 1 (x > 87) or 1.6e-38 instead of eager's 0..1.6e-38 (x < -87). Where table lookups are permutes
// (AVX-512), the divisor comes from sigmoid_divisor_table instead.
//
// What x's range makes needless is left out: a clamp that cannot act (a NaN passes either way), and
// ln2's second part when x >= -3: then k <= 4, and r = c + k ln2 in one fused multiply-add with ln2
// rounded to float is off by at most 4 * 1.9e-9 (0.13 ulp of exp(-c)); for x > 0 an error in
// exp(-c) = 2^k (1 + q) shrinks by exp(-c) / (1 + exp(-c)) in the result.
Value* ScalarMath::sigmoid_f32(Value* x) {
  const Range rx = range(x);
  Value* c = rx.hi > 87.0f ? min_keep_nan(x, 87.0f) : x;
  if (rx.lo < -87.0f) c = max_keep_nan(c, -87.0f);
  if (permute_tables_) return div_finite(fconst(1.0f), sigmoid_divisor_table(c, rx.lo >= -1.0));
  Value* magic = fconst(12582912.0f + 127.0f);
  Value* t = fma(c, fconst(-1.44269504088896341f), magic);
  Value* k = b_.CreateFSub(t, magic);
  Value* r = rx.lo >= -3.0 ? fma(k, fconst(0.693147182f), c)
                           : fma(k, fconst(-2.12194440e-4f), fma(k, fconst(0.693359375f), c));
  Value* two_k = b_.CreateBitCast(b_.CreateShl(b_.CreateBitCast(t, b_.getInt32Ty()), 23), b_.getFloatTy());
  Value* r2 = b_.CreateFMul(r, r);
  Value* h = poly_pairs(r, r2, {4.999999815e-01f, -1.666654366e-01f, 4.166719969e-02f, -8.366515170e-03f, 1.388252251e-03f});
  Value* q = fma(h, r2, b_.CreateFNeg(r));
  Value* d = fma(two_k, q, b_.CreateFAdd(two_k, fconst(1.0f)));
  return div_finite(fconst(1.0f), d);
}

// sigmoid's divisor 1 + exp(-c) for c in [-87, 87] with a table of 2^(j/16), j < 16, whose lookup
// is one register permute (avx512_rewrites.h): -c = k ln2/16 - r with k = round(-c 16/ln2), |r| <=
// ln2/32 (t = -c 16/ln2 + 1.5*2^23 + 127*16 rounds k + 2032 into t's low mantissa bits; k in
// [-2008, 2008]), k = 16m + j, exp(-c) = 2^m T_j exp(-r). T_j is 2^(j/16) rounded to float with its
// exponent field taken out of the table entry (bits(T_j) - j << 19 - 127 << 23), so that adding
// t's bits shifted left by 19, (m + 127) << 23 + j << 19, gives 2^m T_j's bits: a normal float for
// every k (m in [-126, 125]). exp(-r) = 1 - r + c2 r^2 - c3 r^3, a fit on |r| <= ln2/32 (relative
// error 1.6e-9). r = c + k ln2/16 in two parts, the first exact in k ln2/16, and corrected by the
// table's rounding, e_j = ln(T_j) - j ln2/16 (a second table): exp(-c) = 2^m T_j exp(-(r + e_j)).
// 7 multiply-pipe operations and 2 adds plus two lookups, where the polynomial above takes 10 and 2;
// 2.5 ulp over every 3rd float32 (the polynomial: 2.4 over every 7th).
// `narrow` (x >= -1, so k <= 23 and -c <= 1): ln2/16 in one part (rounded to float it is off by
// 1.2e-10: at most 2.7e-9 relative in exp(-c), 0.05 ulp) and no correction e_j (T_j's rounding,
// at most 6e-8 relative in exp(-c), shrinks by exp(-c) / (1 + exp(-c)) <= 0.73 in the result; x >=
// -0.5: 0.62): 6 multiply-pipe operations and 1 add where the polynomial takes 9 and 2 (the 10-op
// chain's loop 5.5 % faster in cache); 2.3 ulp over every 3rd float32 >= -1 (the 10-op chain's
// sigmoid sees x >= -0.5). Without the correction below -1: 3.0-3.1 ulp (x near -6), over budget.
Value* ScalarMath::sigmoid_divisor_table(Value* c, bool narrow) {
  static const uint32_t kExp2[16] = {0x00000000, 0xfffdaac3, 0xfffb95c2, 0xfff9c3d3, 0xfff837f0, 0xfff6f532,
                                     0xfff5fed7, 0xfff5583f, 0xfff504f3, 0xfff508a4, 0xfff5672a, 0xfff6248c,
                                     0xfff744fd, 0xfff8ccdf, 0xfffac0c7, 0xfffd257d};
  static const float kExp2Error[16] = {0.0f,           -4.628547146e-08f, 1.199215749e-08f, -4.729782077e-08f,
                                       -3.193418152e-08f, -3.621057232e-08f, 3.099072288e-08f, 7.475213337e-09f,
                                       -1.711427089e-08f, 3.047683350e-08f, -5.233334210e-09f, -6.107591766e-09f,
                                       1.471960598e-08f, 5.258795177e-09f, 6.128259677e-09f, -5.140609272e-09f};
  llvm::LLVMContext& ctx = m_.getContext();
  llvm::Type* i32 = b_.getInt32Ty();
  Value* magic = fconst(12582912.0f + 2032.0f);
  Value* t = fma(c, fconst(-23.083120654223414f), magic);  // 16 / ln2
  Value* k = b_.CreateFSub(t, magic);
  Value* r = narrow ? fma(k, fconst(0.043321698784996581f), c)  // ln2 / 16; below, its part with 12 bits and the rest
                    : fma(k, fconst(1.996636456e-06f), fma(k, fconst(4.331970215e-02f), c));
  Value* bits = b_.CreateBitCast(t, i32);
  Value* j = b_.CreateAnd(bits, 15);
  Value* entry = table_lookup("tc.exp2_16", llvm::ConstantDataArray::get(ctx, llvm::ArrayRef<uint32_t>(kExp2)), j);
  Value* scale = b_.CreateBitCast(b_.CreateAdd(entry, b_.CreateShl(bits, 19)), b_.getFloatTy());
  if (!narrow)
    r = b_.CreateFAdd(r, table_lookup("tc.exp2_16_error", llvm::ConstantDataArray::get(ctx, llvm::ArrayRef<float>(kExp2Error)), j));
  Value* e = fma(fma(fma(fconst(-1.666672081e-01f), r, fconst(5.000162125e-01f)), r, fconst(-1.0f)), r, fconst(1.0f));
  return fma(scale, e, fconst(1.0f));
}

// table[index] for a 16-entry constant table (an internal global of the module, made once) and an
// i32 index below 16.
Value* ScalarMath::table_lookup(const char* name, llvm::Constant* table, Value* index) {
  llvm::GlobalVariable* g = m_.getNamedGlobal(name);
  if (!g) {
    g = new llvm::GlobalVariable(m_, table->getType(), true, llvm::GlobalValue::InternalLinkage, table, name);
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  }
  llvm::Type* elt = table->getType()->getArrayElementType();
  Value* at = b_.CreateInBoundsGEP(elt, g, b_.CreateZExt(index, b_.getInt64Ty()));
  return b_.CreateAlignedLoad(elt, at, llvm::Align(4));
}

// x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact): log(x) = e ln2 + f - f^2/2 + f^3 Q(f),
// ln2 split in two parts (as eager's exp). Subnormals are scaled by 2^23 first. log2: the same sum
// times log2(e), plus e.
Value* ScalarMath::log_f32(Value* x, bool base2) {
  llvm::Type* i32 = b_.getInt32Ty();
  Value* sub = b_.CreateFCmpOLT(x, fconst(0x1p-126f));
  Value* xs = b_.CreateSelect(sub, b_.CreateFMul(x, fconst(0x1p23f)), x);
  Value* u = b_.CreateBitCast(xs, i32);
  Value* e = b_.CreateSub(b_.CreateLShr(u, 23), b_.CreateSelect(sub, b_.getInt32(150), b_.getInt32(127)));
  Value* m = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(u, 0x7fffff), 0x3f800000), b_.getFloatTy());
  Value* big = b_.CreateFCmpOGT(m, fconst(1.41421356f));
  m = b_.CreateSelect(big, b_.CreateFMul(m, fconst(0.5f)), m);
  e = b_.CreateAdd(e, b_.CreateZExt(big, i32));
  Value* f = b_.CreateFSub(m, fconst(1.0f));
  Value* f2 = b_.CreateFMul(f, f);
  Value* ef = b_.CreateSIToFP(e, b_.getFloatTy());
  Value* q = poly(f, {3.333333135e-01f, -2.499999404e-01f, 2.000071406e-01f, -1.666805744e-01f, 1.424932182e-01f,
                      -1.242014915e-01f, 1.167701408e-01f, -1.151456088e-01f, 7.037580758e-02f});
  Value* r = nullptr;
  if (base2) {
    Value* y = fma(fconst(-0.5f), f2, b_.CreateFMul(b_.CreateFMul(f, f2), q));
    r = b_.CreateFAdd(ef, b_.CreateFMul(b_.CreateFAdd(f, y), fconst(1.44269504088896341f)));
  } else {
    Value* y = fma(b_.CreateFMul(f, f2), q, b_.CreateFMul(ef, fconst(-2.12194440e-4f)));
    y = fma(fconst(-0.5f), f2, y);
    r = fma(ef, fconst(0.693359375f), b_.CreateFAdd(f, y));
  }
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, fconst(INFINITY)), x, r);
  r = b_.CreateSelect(b_.CreateFCmpOLT(x, fconst(0.0f)), fconst(NAN), r);
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, fconst(0.0f)), fconst(-INFINITY), r);
  return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, r);
}

// log(u) x / (u - 1) with u = 1 + x rounded: the factor corrects u's rounding; x where u == 1.
Value* ScalarMath::log1p_f32(Value* x) {
  Value* u = b_.CreateFAdd(fconst(1.0f), x);
  Value* d = b_.CreateFSub(u, fconst(1.0f));
  Value* r = b_.CreateFMul(log_f32(u, false), b_.CreateFDiv(x, d));
  r = b_.CreateSelect(b_.CreateFCmpOEQ(d, fconst(0.0f)), x, r);
  return b_.CreateSelect(b_.CreateFCmpOEQ(u, fconst(INFINITY)), u, r);  // x = inf (x / d would be NaN)
}

// |x| < 0.5: x + x^2/2 + x^3 E(x); else exp(x) - 1.
Value* ScalarMath::expm1_f32(Value* x) {
  Value* a = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* e = poly(x, {1.666666716e-01f, 4.166666418e-02f, 8.333239704e-03f, 1.388895791e-03f, 1.994368067e-04f,
                      2.485159530e-05f});
  Value* small = fma(b_.CreateFMul(b_.CreateFMul(x, x), x), e, fma(b_.CreateFMul(x, fconst(0.5f)), x, x));
  Value* big = b_.CreateFSub(exp_f32(x), fconst(1.0f));
  Value* r = b_.CreateSelect(b_.CreateFCmpOLT(a, fconst(0.5f)), small, big);
  return b_.CreateSelect(b_.CreateFCmpOLT(a, fconst(0x1p-25f)), x, r);  // keeps -0
}

// |x| < 1: x R(x^2); else sign(x) (1 - exp(C(min(|x|, 3.92) - 2.45))), C fitting log(erfc) on
// [1, 3.92] (past it erf rounds to 1).
Value* ScalarMath::erf_f32(Value* x) {
  Value* a = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* small = b_.CreateFMul(x, poly(b_.CreateFMul(x, x), {1.128379107e+00f, -3.761262596e-01f, 1.128358543e-01f,
                                                              -2.685381100e-02f, 5.188327748e-03f, -8.010192541e-04f,
                                                              7.853857824e-05f}));
  Value* ac = b_.CreateFSub(b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, a, fconst(3.92f)), fconst(2.45f));
  Value* c = poly(ac, {-7.541539669e+00f, -5.258373737e+00f, -9.422318935e-01f, -1.130200736e-02f, 2.273327205e-03f,
                       -4.444491351e-04f, 8.202552272e-05f, -1.373735631e-05f, 1.649590672e-06f, -4.222013672e-08f});
  Value* big = b_.CreateFSub(fconst(1.0f), exp_f32(c));
  big = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, big, x);
  Value* r = b_.CreateSelect(b_.CreateFCmpOLT(a, fconst(1.0f)), small, big);
  return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, r);
}

Value* ScalarMath::unary(ScalarOp op, Ty t, Value* x) {
  const bool fl = is_float(t);
  switch (op) {
    case ScalarOp::neg:
      if (t == Ty::Bool) return x;
      return fl ? b_.CreateFNeg(x) : b_.CreateSub(ci(t, 0), x);
    case ScalarOp::abs:
      if (t == Ty::Bool) return x;
      if (fl) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
    case ScalarOp::sign: {  // (0 < v) - (v < 0): NaN gives 0, like eager
      if (t == Ty::Bool) return x;
      Value* pos = fl ? b_.CreateFCmpOLT(cf(t, 0), x) : b_.CreateICmpSLT(ci(t, 0), x);
      Value* neg = fl ? b_.CreateFCmpOLT(x, cf(t, 0)) : b_.CreateICmpSLT(x, ci(t, 0));
      Value* s = b_.CreateSub(b_.CreateZExt(pos, b_.getInt32Ty()), b_.CreateZExt(neg, b_.getInt32Ty()));
      return cast(s, Ty::I32, t);
    }
    case ScalarOp::sqrt:
      TC_CHECK(fl, CompileError, "cpu codegen: sqrt of a non-float value");
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case ScalarOp::rsqrt:
      TC_CHECK(fl, CompileError, "cpu codegen: rsqrt of a non-float value");
      return b_.CreateFDiv(cf(t, 1), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
    case ScalarOp::exp: return t == Ty::F32 ? exp_f32(x) : libm("expf", "exp", t, x);
    case ScalarOp::exp2: return libm("exp2f", "exp2", t, x);
    case ScalarOp::log: return t == Ty::F32 ? log_f32(x, false) : libm("logf", "log", t, x);
    case ScalarOp::log2: return t == Ty::F32 ? log_f32(x, true) : libm("log2f", "log2", t, x);
    case ScalarOp::log1p: return t == Ty::F32 ? log1p_f32(x) : libm("log1pf", "log1p", t, x);
    case ScalarOp::expm1: return t == Ty::F32 ? expm1_f32(x) : libm("expm1f", "expm1", t, x);
    case ScalarOp::sin: return libm("sinf", "sin", t, x);
    case ScalarOp::cos: return libm("cosf", "cos", t, x);
    case ScalarOp::tan: return libm("tanf", "tan", t, x);
    case ScalarOp::tanh: return t == Ty::F32 ? tanh_f32(x) : libm("tanhf", "tanh", t, x);
    case ScalarOp::erf: return t == Ty::F32 ? erf_f32(x) : libm("erff", "erf", t, x);
    case ScalarOp::sigmoid: {  // 1 / (1 + exp(-x)), eager's formula
      TC_CHECK(fl, CompileError, "cpu codegen: sigmoid of a non-float value");
      if (t == Ty::F32) return sigmoid_f32(x);
      Value* e = unary(ScalarOp::exp, t, b_.CreateFNeg(x));
      return b_.CreateFDiv(cf(t, 1), b_.CreateFAdd(cf(t, 1), e));
    }
    case ScalarOp::floor: return fl ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x) : x;
    case ScalarOp::ceil: return fl ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x) : x;
    case ScalarOp::round: return fl ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x) : x;
    case ScalarOp::trunc: return fl ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x) : x;
    case ScalarOp::reciprocal:
      TC_CHECK(fl, CompileError, "cpu codegen: reciprocal of a non-float value");
      return b_.CreateFDiv(cf(t, 1), x);
    case ScalarOp::logical_not: return b_.CreateNot(cast(x, t, Ty::Bool));
    case ScalarOp::bitwise_not:
      TC_CHECK(!fl, CompileError, "cpu codegen: bitwise_not of a float value");
      return b_.CreateNot(x);
    case ScalarOp::isnan: return fl ? b_.CreateFCmpUNO(x, x) : b_.getFalse();
    case ScalarOp::round_f16:
    case ScalarOp::round_bf16: {  // through memory's form, as a store and a load would
      const DType d = op == ScalarOp::round_f16 ? DType::Float16 : DType::BFloat16;
      return from_memory(to_memory(x, t, d), d);
    }
    case ScalarOp::isinf:
      return fl ? b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), cf(t, INFINITY)) : b_.getFalse();
    default: break;
  }
  TC_FAIL(CompileError, "cpu codegen: %s is not a unary primitive", lower::scalar_op_name(op));
}

// Integer div_trunc / div_floor / mod / fmod. A divisor of -1 is special-cased (INT_MIN / -1
// traps on x86) and one of 0 gives 0 instead of trapping.
Value* ScalarMath::int_div(ScalarOp op, Value* x, Value* y) {
  llvm::Type* it = x->getType();
  auto c = [&](int64_t v) { return llvm::ConstantInt::get(it, (uint64_t)v, true); };
  Value* minus1 = b_.CreateICmpEQ(y, c(-1));
  Value* zero = b_.CreateICmpEQ(y, c(0));
  Value* safe = b_.CreateSelect(b_.CreateOr(minus1, zero), c(1), y);
  Value* r = nullptr;
  Value* at_minus1 = nullptr;
  if (op == ScalarOp::div_trunc || op == ScalarOp::div_floor) {
    Value* q = b_.CreateSDiv(x, safe);
    if (op == ScalarOp::div_floor) {
      Value* rem = b_.CreateSRem(x, safe);
      Value* adjust = b_.CreateAnd(b_.CreateICmpNE(rem, c(0)),
                                   b_.CreateICmpNE(b_.CreateICmpSLT(x, c(0)), b_.CreateICmpSLT(y, c(0))));
      q = b_.CreateSub(q, b_.CreateZExt(adjust, it));
    }
    r = q;
    at_minus1 = b_.CreateSub(c(0), x);
  } else {
    Value* rem = b_.CreateSRem(x, safe);
    if (op == ScalarOp::mod) {  // the divisor's sign
      Value* adjust = b_.CreateAnd(b_.CreateICmpNE(rem, c(0)),
                                   b_.CreateICmpNE(b_.CreateICmpSLT(rem, c(0)), b_.CreateICmpSLT(y, c(0))));
      rem = b_.CreateSelect(adjust, b_.CreateAdd(rem, y), rem);
    }
    r = rem;
    at_minus1 = c(0);
  }
  return b_.CreateSelect(zero, c(0), b_.CreateSelect(minus1, at_minus1, r));
}

// Python's float floor division, as eager's div_floor_float.
Value* ScalarMath::float_div_floor(Value* a, Value* b) {
  llvm::Type* ft = a->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(ft, v); };
  Value* mod = b_.CreateFRem(a, b);
  Value* div = b_.CreateFDiv(b_.CreateFSub(a, mod), b);
  Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(mod, c(0)),
                               b_.CreateXor(b_.CreateFCmpOLT(b, c(0)), b_.CreateFCmpOLT(mod, c(0))));
  div = b_.CreateSelect(adjust, b_.CreateFSub(div, c(1)), div);
  Value* floordiv = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, div);
  floordiv = b_.CreateSelect(b_.CreateFCmpOGT(b_.CreateFSub(div, floordiv), c(0.5)), b_.CreateFAdd(floordiv, c(1)), floordiv);
  Value* quotient = b_.CreateFDiv(a, b);
  Value* signed_zero = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, c(0), quotient);
  Value* r = b_.CreateSelect(b_.CreateFCmpOEQ(div, c(0)), signed_zero, floordiv);
  return b_.CreateSelect(b_.CreateFCmpOEQ(b, c(0)), quotient, r);
}

// Integer power by squaring (wrapping); negative exponents give 1, +-1 or 0, as eager's pow_int.
// One internal function per integer width, inlined by the optimizer.
Value* ScalarMath::int_pow(Value* x, Value* y) {
  llvm::Type* it = x->getType();
  std::string name = "tc.pow.i" + std::to_string(it->getIntegerBitWidth());
  llvm::Function* f = m_.getFunction(name);
  if (!f) {
    f = llvm::Function::Create(llvm::FunctionType::get(it, {it, it}, false), llvm::GlobalValue::InternalLinkage,
                               name, m_);
    f->addFnAttr(llvm::Attribute::AlwaysInline);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(m_.getContext());
    auto c = [&](int64_t v) { return llvm::ConstantInt::get(it, (uint64_t)v, true); };
    auto* entry = llvm::BasicBlock::Create(m_.getContext(), "entry", f);
    auto* negative = llvm::BasicBlock::Create(m_.getContext(), "negative", f);
    auto* loop = llvm::BasicBlock::Create(m_.getContext(), "loop", f);
    auto* done = llvm::BasicBlock::Create(m_.getContext(), "done", f);
    Value* a = f->getArg(0);
    Value* e = f->getArg(1);
    b.SetInsertPoint(entry);
    b.CreateCondBr(b.CreateICmpSLT(e, c(0)), negative, loop);
    b.SetInsertPoint(negative);
    Value* odd = b.CreateICmpNE(b.CreateAnd(e, c(1)), c(0));
    Value* at_minus1 = b.CreateSelect(odd, c(-1), c(1));
    b.CreateRet(b.CreateSelect(b.CreateICmpEQ(a, c(1)), c(1), b.CreateSelect(b.CreateICmpEQ(a, c(-1)), at_minus1, c(0))));
    b.SetInsertPoint(loop);
    llvm::PHINode* r = b.CreatePHI(it, 2);
    llvm::PHINode* base = b.CreatePHI(it, 2);
    llvm::PHINode* exp = b.CreatePHI(it, 2);
    r->addIncoming(c(1), entry);
    base->addIncoming(a, entry);
    exp->addIncoming(e, entry);
    Value* done_now = b.CreateICmpEQ(exp, c(0));
    Value* r_next = b.CreateSelect(b.CreateICmpNE(b.CreateAnd(exp, c(1)), c(0)), b.CreateMul(r, base), r);
    r->addIncoming(r_next, loop);
    base->addIncoming(b.CreateMul(base, base), loop);
    exp->addIncoming(b.CreateLShr(exp, c(1)), loop);
    b.CreateCondBr(done_now, done, loop);
    b.SetInsertPoint(done);
    b.CreateRet(r);
  }
  return b_.CreateCall(f, {x, y});
}

// A float mul of the graph, or an add or sub of one with a constant, that the backend may fuse
// into a fused multiply-add (`contract` on both: one rounding where eager rounds twice, DESIGN.md
// section 4's tolerance): x * 1.5 + 0.25 is one instruction instead of two (1.6 % of the 10-op
// chain's loop). Not an add or sub of two computed values: fma(a, a, -(b * b)) gives the rounding
// error of b * b where eager's a * a - b * b is 0 for a == b, and a square root of it NaN. (tanh's
// own closing product does fuse into a graph add or sub, `binary`: that is not a graph value.)
Value* ScalarMath::contractible(Value* v) {
  auto* i = llvm::dyn_cast<llvm::Instruction>(v);
  if (!i) return v;
  if (i->getOpcode() != llvm::Instruction::FMul && !llvm::isa<llvm::Constant>(i->getOperand(0)) &&
      !llvm::isa<llvm::Constant>(i->getOperand(1)))
    return v;
  llvm::FastMathFlags f = i->getFastMathFlags();
  f.setAllowContract();
  i->setFastMathFlags(f);
  return v;
}

// x + k for a constant k, taken in by what made x where that is exact: (v + c) + k is v + (c + k)
// when c + k is a float (one rounding where eager rounds twice, as a fused multiply-add: never
// further from the exact value), and a clamp where(v < C, C, v) + k is where(v + k < C + k, C + k,
// v + k) when C + k is a float (the same value: rounding is monotone and C + k needs none; also
// for <=, >, >=), k going on into v. relu(x * 1.5 + 0.25) - 0.5 is max(x * 1.5 - 0.25, -0.5): a
// fused multiply-add and a max, one add fewer (the 10-op chain's loop: 3-4 % in cache). nullptr
// where neither applies. (A clamp whose value is also used elsewhere stays as well: one operation
// more there.)
Value* ScalarMath::add_constant(Value* x, llvm::ConstantFP* k) {
  auto exact_sum = [&](llvm::ConstantFP* c, bool minus_c) -> llvm::ConstantFP* {
    llvm::APFloat sum = k->getValueAPF();
    const llvm::APFloat::opStatus st = minus_c ? sum.subtract(c->getValueAPF(), llvm::APFloat::rmNearestTiesToEven)
                                               : sum.add(c->getValueAPF(), llvm::APFloat::rmNearestTiesToEven);
    return st == llvm::APFloat::opOK ? llvm::ConstantFP::get(x->getContext(), sum) : nullptr;
  };
  auto* i = llvm::dyn_cast<llvm::Instruction>(x);
  if (!i || k->isZero()) return nullptr;
  if (i->getOpcode() == llvm::Instruction::FAdd || i->getOpcode() == llvm::Instruction::FSub) {
    const bool sub = i->getOpcode() == llvm::Instruction::FSub;
    for (unsigned s = sub ? 1 : 0; s < 2; s++)
      if (auto* c = llvm::dyn_cast<llvm::ConstantFP>(i->getOperand(s)))
        if (llvm::ConstantFP* ck = exact_sum(c, sub)) return contractible(b_.CreateFAdd(i->getOperand(1 - s), ck));
    return nullptr;
  }
  auto* sel = llvm::dyn_cast<llvm::SelectInst>(i);
  auto* cmp = sel ? llvm::dyn_cast<llvm::FCmpInst>(sel->getCondition()) : nullptr;
  auto* c = sel ? llvm::dyn_cast<llvm::ConstantFP>(sel->getTrueValue()) : nullptr;
  if (!cmp || !c || cmp->getOperand(0) != sel->getFalseValue() || cmp->getOperand(1) != c) return nullptr;
  const llvm::CmpInst::Predicate p = cmp->getPredicate();
  if (p != llvm::CmpInst::FCMP_OLT && p != llvm::CmpInst::FCMP_OLE && p != llvm::CmpInst::FCMP_OGT &&
      p != llvm::CmpInst::FCMP_OGE)
    return nullptr;
  llvm::ConstantFP* ck = exact_sum(c, false);
  if (!ck) return nullptr;
  Value* v = add_constant(sel->getFalseValue(), k);
  if (!v) v = contractible(b_.CreateFAdd(sel->getFalseValue(), k));
  return b_.CreateSelect(b_.CreateFCmp(p, v, ck), ck, v);
}

Value* ScalarMath::binary(ScalarOp op, Ty t, Value* x, Value* y, const double* const_b) {
  const bool fl = is_float(t), bl = t == Ty::Bool;
  if (fl && (op == ScalarOp::add || op == ScalarOp::sub)) {  // tanh(v) + w as fma(c, ratio, w)
    auto open = [&](Value* v) { auto it = open_products_.find(v); return it == open_products_.end() ? nullptr : &it->second; };
    if (auto* f = open(x)) return fma(f->first, f->second, op == ScalarOp::add ? y : b_.CreateFNeg(y));
    if (auto* f = open(y)) return fma(op == ScalarOp::add ? f->first : b_.CreateFNeg(f->first), f->second, x);
    if (op == ScalarOp::add && llvm::isa<llvm::ConstantFP>(x)) std::swap(x, y);
    if (auto* k = llvm::dyn_cast<llvm::ConstantFP>(y)) {
      llvm::APFloat kv = k->getValueAPF();
      if (op == ScalarOp::sub) kv.changeSign();
      if (Value* r = add_constant(x, llvm::ConstantFP::get(x->getContext(), kv))) return r;
    }
  }
  switch (op) {
    case ScalarOp::add: return fl ? contractible(b_.CreateFAdd(x, y)) : bl ? b_.CreateOr(x, y) : b_.CreateAdd(x, y);
    case ScalarOp::sub: return fl ? contractible(b_.CreateFSub(x, y)) : bl ? b_.CreateXor(x, y) : b_.CreateSub(x, y);
    case ScalarOp::mul: return fl ? contractible(b_.CreateFMul(x, y)) : bl ? b_.CreateAnd(x, y) : b_.CreateMul(x, y);
    case ScalarOp::div:
      TC_CHECK(fl, CompileError, "cpu codegen: true division of non-float values");
      return b_.CreateFDiv(x, y);
    case ScalarOp::div_trunc:
      if (fl) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, b_.CreateFDiv(x, y));
      break;
    case ScalarOp::div_floor:
      if (fl) return float_div_floor(x, y);
      break;
    case ScalarOp::mod:
      if (fl) {  // fmod, then the divisor's sign
        Value* m = b_.CreateFRem(x, y);
        Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(m, cf(t, 0)),
                                     b_.CreateXor(b_.CreateFCmpOLT(y, cf(t, 0)), b_.CreateFCmpOLT(m, cf(t, 0))));
        return b_.CreateSelect(adjust, b_.CreateFAdd(m, y), m);
      }
      break;
    case ScalarOp::fmod:
      if (fl) return b_.CreateFRem(x, y);
      break;
    case ScalarOp::pow:
      if (fl) {
        if (const_b && *const_b == 2) return b_.CreateFMul(x, x);
        if (const_b && *const_b == 3) return b_.CreateFMul(b_.CreateFMul(x, x), x);
        if (const_b && *const_b == 0.5) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
        if (const_b && *const_b == -1) return b_.CreateFDiv(cf(t, 1), x);
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
      }
      if (bl) return b_.CreateOr(x, b_.CreateNot(y));  // x^0 = 1, x^1 = x
      return int_pow(x, y);
    case ScalarOp::minimum:
      if (fl) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, x, y);
      return bl ? b_.CreateAnd(x, y) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y);
    case ScalarOp::maximum:
      if (fl) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y);
      return bl ? b_.CreateOr(x, y) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y);
    case ScalarOp::eq: return fl ? b_.CreateFCmpOEQ(x, y) : b_.CreateICmpEQ(x, y);
    case ScalarOp::ne: return fl ? b_.CreateFCmpUNE(x, y) : b_.CreateICmpNE(x, y);
    case ScalarOp::lt: return fl ? b_.CreateFCmpOLT(x, y) : bl ? b_.CreateICmpULT(x, y) : b_.CreateICmpSLT(x, y);
    case ScalarOp::le: return fl ? b_.CreateFCmpOLE(x, y) : bl ? b_.CreateICmpULE(x, y) : b_.CreateICmpSLE(x, y);
    case ScalarOp::gt: return fl ? b_.CreateFCmpOGT(x, y) : bl ? b_.CreateICmpUGT(x, y) : b_.CreateICmpSGT(x, y);
    case ScalarOp::ge: return fl ? b_.CreateFCmpOGE(x, y) : bl ? b_.CreateICmpUGE(x, y) : b_.CreateICmpSGE(x, y);
    case ScalarOp::logical_and: return b_.CreateAnd(cast(x, t, Ty::Bool), cast(y, t, Ty::Bool));
    case ScalarOp::logical_or: return b_.CreateOr(cast(x, t, Ty::Bool), cast(y, t, Ty::Bool));
    case ScalarOp::logical_xor: return b_.CreateXor(cast(x, t, Ty::Bool), cast(y, t, Ty::Bool));
    case ScalarOp::bitwise_and:
    case ScalarOp::bitwise_or:
    case ScalarOp::bitwise_xor:
      TC_CHECK(!fl, CompileError, "cpu codegen: %s of float values", lower::scalar_op_name(op));
      if (op == ScalarOp::bitwise_and) return b_.CreateAnd(x, y);
      if (op == ScalarOp::bitwise_or) return b_.CreateOr(x, y);
      return b_.CreateXor(x, y);
    default:
      TC_FAIL(CompileError, "cpu codegen: %s is not a binary primitive", lower::scalar_op_name(op));
  }
  // The integer divisions.
  TC_CHECK(!bl, CompileError, "cpu codegen: %s of bool values", lower::scalar_op_name(op));
  return int_div(op, x, y);
}

Value* ScalarMath::op(ScalarOp op, Ty result, const std::vector<Value*>& a, const std::vector<Ty>& tys,
                      const double* const_b) {
  if (op == ScalarOp::cast) return cast(a[0], tys[0], result);
  Value* r = nullptr;
  if (op == ScalarOp::where) {
    r = b_.CreateSelect(cast(a[0], tys[0], Ty::Bool), a[1], cast(a[2], tys[2], tys[1]));
  } else if (a.size() == 1) {
    r = unary(op, tys[0], a[0]);
  } else {
    TC_CHECK(a.size() == 2, CompileError, "cpu codegen: %s with %zu operands", lower::scalar_op_name(op), a.size());
    // Operands of different types meet at the result's type (predicates: at the wider operand's).
    Ty t = tys[0];
    if (tys[1] != t) t = result == Ty::Bool ? std::max(tys[0], tys[1]) : result;
    r = binary(op, t, cast(a[0], tys[0], t), cast(a[1], tys[1], t), const_b);
  }
  if (r->getType()->isFloatingPointTy()) note_range(op, a, r);
  return r;
}

ScalarMath::Range ScalarMath::range(Value* v) const {
  if (auto* c = llvm::dyn_cast<llvm::ConstantFP>(v)) {
    const double d = c->getValueAPF().convertToDouble();
    if (!std::isnan(d)) return {d, d};
  }
  auto it = ranges_.find(v);
  return it == ranges_.end() ? Range{} : it->second;
}

// Interval arithmetic in double, widened by a millionth (float roundings of the bounds; every op
// used here is monotone in each operand); a NaN bound (inf - inf, 0 * inf) leaves the value unknown.
void ScalarMath::note_range(ScalarOp op, const std::vector<Value*>& a, Value* r) {
  Range o;
  auto of = [&](size_t i) { return i < a.size() ? range(a[i]) : Range{}; };
  switch (op) {
    case ScalarOp::add: o = {of(0).lo + of(1).lo, of(0).hi + of(1).hi}; break;
    case ScalarOp::sub: o = {of(0).lo - of(1).hi, of(0).hi - of(1).lo}; break;
    case ScalarOp::mul: {
      const Range p = of(0), q = of(1);
      const double e[4] = {p.lo * q.lo, p.lo * q.hi, p.hi * q.lo, p.hi * q.hi};
      o = {*std::min_element(e, e + 4), *std::max_element(e, e + 4)};
      break;
    }
    case ScalarOp::maximum: o = {std::max(of(0).lo, of(1).lo), std::max(of(0).hi, of(1).hi)}; break;
    case ScalarOp::minimum: o = {std::min(of(0).lo, of(1).lo), std::min(of(0).hi, of(1).hi)}; break;
    case ScalarOp::neg: o = {-of(0).hi, -of(0).lo}; break;
    case ScalarOp::abs: {
      const Range p = of(0);
      o = p.lo >= 0 ? p : Range{0, std::max(-p.lo, p.hi)};
      break;
    }
    case ScalarOp::sigmoid: o = {0, 1}; break;
    case ScalarOp::tanh: o = {-1, 1}; break;
    case ScalarOp::exp: o = {0, INFINITY}; break;
    case ScalarOp::where: {  // either value; where(v < C, C, v) is max(v, C), where(v > C, C, v) min(v, C)
      const Range p = of(1), q = of(2);
      o = {std::min(p.lo, q.lo), std::max(p.hi, q.hi)};
      auto* cmp = llvm::dyn_cast<llvm::FCmpInst>(a[0]);
      if (cmp && cmp->getOperand(0) == a[2] && cmp->getOperand(1) == a[1] && llvm::isa<llvm::ConstantFP>(a[1])) {
        if (cmp->getPredicate() == llvm::CmpInst::FCMP_OLT || cmp->getPredicate() == llvm::CmpInst::FCMP_OLE)
          o = {std::max(q.lo, p.lo), std::max(q.hi, p.lo)};
        if (cmp->getPredicate() == llvm::CmpInst::FCMP_OGT || cmp->getPredicate() == llvm::CmpInst::FCMP_OGE)
          o = {std::min(q.lo, p.lo), std::min(q.hi, p.lo)};
      }
      break;
    }
    default: return;
  }
  if (std::isnan(o.lo) || std::isnan(o.hi)) return;
  o.lo -= std::fabs(o.lo) * 1e-6;
  o.hi += std::fabs(o.hi) * 1e-6;
  ranges_[r] = o;
}

}  // namespace tc::backends::cpu
