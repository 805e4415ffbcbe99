// Random numbers: one process-wide counter-based Philox4x32-10 generator, so that every device,
// eager or compiled, produces the same values for the same seed.
//
//   tc::manual_seed(42);
//   tc::Tensor x = tc::call1(tc::Op::randn, {2, 3});          // the same values on CPU and CUDA
//   tc::Tensor m = tc::bernoulli_mask({4, 4}, 0.9, tc::DType::Float32, 1 / 0.9);  // dropout mask
//
// THE STREAM. The generator state is (seed, offset); offset counts 32-bit words and is always a
// multiple of 4. A random op that needs W words per element for n elements calls
// philox_reserve(W * n): it gets the current state and the offset advances by W * n rounded up
// to a multiple of 4. Word k of that op (k = 0, 1, ...) is lane k % 4 of the Philox block
//     philox4x32_10(counter = {lo32(b), hi32(b), 0, 0}, key = {lo32(seed), hi32(seed)}),
//     b = offset / 4 + k / 4.
// Elements are numbered in row-major order of the result's sizes (strides play no part), and
// element i uses words W*i .. W*i+W-1, so its value depends only on (seed, offset, i): results do
// not depend on thread count, grid shape or memory layout.
//
// FROM WORDS TO VALUES (the CUDA kernels must do exactly this):
//   uniform_bits(w, d)  = (w >> (32 - d)) * 2^-d              d <= 32 bits of one word, in [0, 1)
//   uniform53(w0, w1)   = ((w1 << 32 | w0) >> 11) * 2^-53     two words, in [0, 1)
//   rand / uniform_(from, to), W = 1 (float64: W = 2):
//     u = uniform_bits(w, d) with d = 24 (float32), 11 (float16), 8 (bfloat16); float64: uniform53.
//     v = (T) fma(u, to - from, from) in double; if v >= to (rounding) and from < to, v is the
//     largest T below to. With from = 0, to = 1 the result is u exactly. (Every "(T) double"
//     here rounds to float first for float16/bfloat16, then to the 16-bit type.)
//   randn / normal_(mean, std): Box-Muller, computed in double with log, sqrt, cos, sin:
//     float32/16/bf16, W = 1: block b gives elements 4b..4b+3 from its lanes (w0, w1, w2, w3):
//       (u1, u2) = (uniform_bits(w0, 24), uniform_bits(w1, 24)) -> elements 4b (cos), 4b+1 (sin)
//       (u1, u2) = (uniform_bits(w2, 24), uniform_bits(w3, 24)) -> elements 4b+2 (cos), 4b+3 (sin)
//     float64, W = 2: block b gives elements 2b (cos), 2b+1 (sin) from
//       (u1, u2) = (uniform53(w0, w1), uniform53(w2, w3)).
//     z = sqrt(-2 log(1 - u1)) * {cos, sin}(2 pi u2); v = (T) fma(z, std, mean) in double.
//     (libm and CUDA's double functions agree to an ulp of double, so float results match except
//     in vanishingly rare rounding cases; float64 results may differ in the last bit.)
//   randint(low, high), range r = high - low: r <= 2^32: W = 1, v = low + w % r;
//     r > 2^32: W = 2, v = low + (w1 << 32 | w0) % r.
//   bernoulli(p), W = 1: v = (w * 2^-32 < p) in double, so p = 0 never and p = 1 always fires.
//   multinomial, W = 2 per draw, u = uniform53(w0, w1):
//     with replacement: draw k = row * num_samples + s picks the first category c whose
//       cumulative sum (double, in category order) exceeds u * row_sum.
//     without replacement: draw k = row * categories + c gives the key (-log(1 - u)) / p_c
//       (infinite for p_c = 0); the num_samples smallest keys, ties to the lower category, are
//       the result in increasing key order (the exponential-race form of sampling without
//       replacement).
#pragma once
#include <cstdint>

#include "tc/tensor.h"

#if defined(__CUDACC__)
#define TC_HOST_DEVICE __host__ __device__
#else
#define TC_HOST_DEVICE
#endif

namespace tc {

constexpr uint64_t kDefaultSeed = 67280421310721ull;  // the seed before any manual_seed

struct RngState {
  uint64_t seed = kDefaultSeed;
  uint64_t offset = 0;  // 32-bit words consumed so far, a multiple of 4
};

void manual_seed(uint64_t seed);  // sets the seed and resets the offset to 0
uint64_t initial_seed();          // the current seed
RngState get_rng_state();
void set_rng_state(RngState s);  // ValueError unless offset is a multiple of 4
// Reserves `words` 32-bit words of the stream (thread-safe): returns the state to draw from
// and advances the offset by `words` rounded up to a multiple of 4.
RngState philox_reserve(uint64_t words);

struct PhiloxBlock {
  uint32_t w[4];
};

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
TC_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Block `b` (0-based, relative to the op) of a reserved stream.
TC_HOST_DEVICE inline PhiloxBlock philox_block(const RngState& s, uint64_t b) {
  uint64_t c = s.offset / 4 + b;
  return philox4x32_10((uint32_t)c, (uint32_t)(c >> 32), 0, 0, (uint32_t)s.seed, (uint32_t)(s.seed >> 32));
}

TC_HOST_DEVICE inline double uniform_bits(uint32_t w, int bits) {
  return (double)(w >> (32 - bits)) * (1.0 / (double)(1ull << bits));
}
TC_HOST_DEVICE inline double uniform53(uint32_t w0, uint32_t w1) {
  return (double)((((uint64_t)w1 << 32) | w0) >> 11) * 0x1p-53;
}

// A tensor of `sizes` whose elements are `scale` with probability p_keep, else 0: the same
// stream as bernoulli(p = p_keep) (element i fires when word i * 2^-32 < p_keep). For dropout:
// bernoulli_mask(x.sizes(), 1 - p, x.dtype(), 1 / (1 - p)) * x.
Tensor bernoulli_mask(const Shape& sizes, double p_keep, DType dtype, double scale = 1.0,
                      Device device = {});

}  // namespace tc
