// What the O3 pipeline leaves in a module that AVX-512 hosts do better, rewritten before code
// generation (jit.cpp), on modules that prepare() marked with the flag below (hosts with AVX-512 F
// and VL):
// - a gather from a 16-entry constant table becomes a permute of the table held in registers.
//   ScalarMath's lookups load table[i & 15]; the loop vectorizer makes that a gather (vpgatherdd:
//   16 loads per vector, the 10-op chain 1.8x slower); vpermd/vpermps do 16 lanes in one
//   instruction, vpermt2d 8 lanes (over the table's two halves);
// - a reciprocal-estimate division (`arcp`, ScalarMath's div_finite) of 8 or 4 lanes becomes
//   vrcp14ps and one Newton step, as LLVM lowers 16 lanes (for 8 and 4 it takes rcpps's 12 bits:
//   sigmoid up to 3.5 ulp in a loop's 8-lane remainder), and a scalar one an exact division
//   (rcpss has 12 bits too).
#pragma once

namespace llvm {
class Module;
}  // namespace llvm

namespace tc::backends::cpu {

// Module flag (an i32 1) of modules to rewrite; ScalarMath emits table lookups only into these.
constexpr const char* kAvx512Flag = "tc.avx512-rewrites";

// Both rewrites over every function of `m`: gathers of 16 or 8 lanes whose addresses are a
// 16-entry constant i32 or float table indexed by a zero-extended i32 vector (other gathers stay),
// and `arcp` float divisions of 8 or 4 lanes or one. Returns how many instructions it rewrote.
int rewrite_for_avx512(llvm::Module& m);

}  // namespace tc::backends::cpu
