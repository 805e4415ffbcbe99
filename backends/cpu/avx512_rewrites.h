// What the O3 pipeline leaves in a module that AVX-512 hosts do better, rewritten before code
// generation (jit.cpp), on modules that prepare() marked with the flag below (hosts with AVX-512 F
// and VL):
// - a gather from a 16-entry constant table becomes a permute of the table held in registers.
//   ScalarMath's lookups load table[i & 15]; the loop vectorizer makes that a gather (vpgatherdd:
//   16 loads per vector, the 10-op chain 1.8x slower); vpermd/vpermps do 16 lanes in one
//   instruction, vpermt2d 8 lanes (over the table's two halves);
// - a reciprocal-estimate division (`arcp`, ScalarMath's div_finite) of any width (16, 8, 4, 2 lanes
//   or one float) becomes vrcp14ps and one Newton step, as LLVM lowers 16 lanes where it uses zmm:
//   the same bits for an element whether it falls in a loop's body (16 lanes, or 8 where the host's
//   tuning prefers 256-bit vectors: Intel server cores), a vector remainder, an SLP-vectorized pair
//   or a scalar iteration. LLVM alone takes rcpps's 12 bits for 8 and 4 lanes (sigmoid up to 3.5
//   ulp) and divides a scalar exactly; either made results depend on where an element fell.
#pragma once

namespace llvm {
class Module;
}  // namespace llvm

namespace tc::backends::cpu {

// Module flag (an i32 1) of modules to rewrite; ScalarMath emits table lookups only into these.
constexpr const char* kAvx512Flag = "tc.avx512-rewrites";

// Both rewrites over every function of `m`: gathers of 16 or 8 lanes whose addresses are a
// 16-entry constant i32 or float table indexed by a zero-extended i32 vector (other gathers stay),
// and `arcp` float divisions of any width. `vector_bits` is the target's vector register width as
// the optimizer used it (512, or 256 where the tuning prefers it): reciprocal estimates take zmm
// only where it is 512. Returns how many instructions it rewrote.
int rewrite_for_avx512(llvm::Module& m, unsigned vector_bits);

}  // namespace tc::backends::cpu
