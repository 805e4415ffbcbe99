// The prelude of every generated CUDA program: our own types (no cuda_fp16.h), conversions that
// match the CPU kernels bit for bit (float16 through cvt.rn, bfloat16 round-to-nearest-even with
// quiet NaN), float/double math overloads and the integer and floor-division helpers the CPU
// kernels use.
#include "cuda/runtime.h"

namespace tc::cuda {

const std::string& prelude() {
  static const std::string p = R"CUDA(
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;
struct __align__(2) f16 { unsigned short x; };
struct __align__(2) bf16 { unsigned short x; };
template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };
__device__ __forceinline__ float ld(f16 v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f; }
__device__ __forceinline__ float ld(bf16 v) { return __uint_as_float(((unsigned)v.x) << 16); }
template <typename T> __device__ __forceinline__ T ld(T v) { return v; }
template <typename D> struct Cv { template <typename V> __device__ __forceinline__ static D f(V v) { return (D)v; } };
template <> struct Cv<bool> { template <typename V> __device__ __forceinline__ static bool f(V v) { return v != (V)0; } };
template <> struct Cv<u8> { template <typename V> __device__ __forceinline__ static u8 f(V v) { return (u8)(i64)v; } };
template <> struct Cv<f16> {
  template <typename V> __device__ __forceinline__ static f16 f(V v) {
    f16 r; float x = (float)v; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(x)); return r;
  }
};
template <> struct Cv<bf16> {
  template <typename V> __device__ __forceinline__ static bf16 f(V v) {
    unsigned x = __float_as_uint((float)v); bf16 r;
    if ((x & 0x7fffffffu) > 0x7f800000u) r.x = (unsigned short)((x >> 16) | 0x40);
    else { x += 0x7fffu + ((x >> 16) & 1u); r.x = (unsigned short)(x >> 16); }
    return r;
  }
};
template <typename D, typename S> __device__ __forceinline__ D cvt(S s) { return Cv<D>::f(ld(s)); }
#define TC_M1(n) __device__ __forceinline__ float m_##n(float x) { return n##f(x); } \
                 __device__ __forceinline__ double m_##n(double x) { return n(x); }
TC_M1(sqrt) TC_M1(exp) TC_M1(exp2) TC_M1(log) TC_M1(log2) TC_M1(log1p) TC_M1(expm1) TC_M1(sin) TC_M1(cos)
TC_M1(tan) TC_M1(tanh) TC_M1(erf) TC_M1(floor) TC_M1(ceil) TC_M1(trunc) TC_M1(fabs) TC_M1(rint)
#define TC_M2(n) __device__ __forceinline__ float m_##n(float x, float y) { return n##f(x, y); } \
                 __device__ __forceinline__ double m_##n(double x, double y) { return n(x, y); }
TC_M2(fmod) TC_M2(pow) TC_M2(copysign)
template <typename M> __device__ __forceinline__ M m_inf() { return (M)__longlong_as_double(0x7ff0000000000000ll); }
template <typename M> __device__ __forceinline__ M wadd(M a, M b) { return (M)((u64)a + (u64)b); }
template <typename M> __device__ __forceinline__ M wsub(M a, M b) { return (M)((u64)a - (u64)b); }
template <typename M> __device__ __forceinline__ M wmul(M a, M b) { return (M)((u64)a * (u64)b); }
template <typename M> __device__ __forceinline__ M div_floor_f(M a, M b) {
  if (b == (M)0) return a / b;
  M mod = m_fmod(a, b);
  M div = (a - mod) / b;
  if (mod != (M)0 && (b < (M)0) != (mod < (M)0)) div -= (M)1;
  if (div == (M)0) return m_copysign((M)0, a / b);
  M fd = m_floor(div);
  if (div - fd > (M)0.5) fd += (M)1;
  return fd;
}
template <typename M> __device__ __forceinline__ M rem_f(M a, M b) {
  M mod = m_fmod(a, b);
  if (mod != (M)0 && (b < (M)0) != (mod < (M)0)) mod += b;
  return mod;
}
template <typename M> __device__ __forceinline__ bool is_signed_t() { return (M)(-1) < (M)0; }
template <typename M> __device__ __forceinline__ M div_trunc_i(M a, M b) {
  if (b == (M)0) return (M)0;
  if (is_signed_t<M>() && b == (M)(-1)) return wsub((M)0, a);
  return (M)(a / b);
}
template <typename M> __device__ __forceinline__ M div_floor_i(M a, M b) {
  if (b == (M)0) return (M)0;
  if (is_signed_t<M>()) {
    if (b == (M)(-1)) return wsub((M)0, a);
    M q = a / b;
    if (a % b != 0 && ((a < (M)0) != (b < (M)0))) q -= 1;
    return q;
  }
  return (M)(a / b);
}
template <typename M> __device__ __forceinline__ M rem_i(M a, M b) {
  if (b == (M)0) return (M)0;
  if (is_signed_t<M>()) {
    if (b == (M)(-1)) return (M)0;
    M r = a % b;
    if (r != 0 && ((r < (M)0) != (b < (M)0))) r += b;
    return r;
  }
  return (M)(a % b);
}
template <typename M> __device__ __forceinline__ M pow_i(M a, M b) {
  if (is_signed_t<M>() && b < (M)0) {
    if (a == (M)1) return (M)1;
    if (a == (M)(-1)) return (b & 1) ? (M)(-1) : (M)1;
    return (M)0;
  }
  M r = 1;
  while (b) { if (b & 1) r = wmul(r, a); a = wmul(a, a); b = (M)(b >> 1); }
  return r;
}
template <typename M> __device__ __forceinline__ M nan_min(M p, M q) { return p != p ? p : q != q ? q : q < p ? q : p; }
template <typename M> __device__ __forceinline__ M nan_max(M p, M q) { return p != p ? p : q != q ? q : p < q ? q : p; }
template <typename M> __device__ __forceinline__ M clampv(M v, M lo, M hi) { if (v != v) return v; M r = v < lo ? lo : v; return r > hi ? hi : r; }
template <typename M> __device__ __forceinline__ M lerp_f(M a, M b, M t) {
  return (t < (M)0 ? -t : t) < (M)0.5 ? a + t * (b - a) : b - (b - a) * ((M)1 - t);
}
template <typename T> __device__ __forceinline__ T shfl_down(T v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ void flag_error(i64* err, i64 code, i64 detail) {
  if (atomicCAS((unsigned long long*)err, 0ull, (unsigned long long)code) == 0ull) err[1] = detail;
}
)CUDA";
  return p;
}

// block_sum(v, sm): the sum of v over a block of up to 256 threads (sm: 9 doubles of shared
// memory), for the row kernels of the reduction and nn groups.
const std::string& block_sum_src() {
  static const std::string s = R"CUDA(
__device__ double block_sum(double v, double* sm) {
  for (int o = 16; o > 0; o >>= 1) v += shfl_down(v, o);
  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < 8 ? sm[threadIdx.x] : 0.0;
    for (int o = 4; o > 0; o >>= 1) v += shfl_down(v, o);
    if (threadIdx.x == 0) sm[8] = v;
  }
  __syncthreads();
  double r = sm[8];
  __syncthreads();
  return r;
}
)CUDA";
  return s;
}

}  // namespace tc::cuda
