// The elementwise loop behind every pointwise kernel: out[i] = f(in0[i], in1[i], ...) over the
// (broadcast) shape of `out`, one template instance per op and dtype, so that the contiguous
// case is a plain loop over raw pointers the compiler vectorizes.
//
//   map<float, float, float>(out, {a, b}, [](float x, float y) { return x + y; });
//
// Inputs must already have the storage types named (kernels convert mixed dtypes first); `f`
// takes and returns opmath values (float for float16/bfloat16) and the result is rounded once.
#pragma once
#include <algorithm>
#include <array>
#include <cstdlib>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cpu/loops.h"
#include "tc/tensor.h"

namespace tc::cpu {

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<opmath_t<T>>;
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !kIsBool<T>;

// PyTorch's conversions: floating to uint8 goes through int64 (so -1.5 becomes 255), anything to
// bool is "nonzero", everything else a static_cast through the opmath type.
template <typename Out, typename V>
inline Out out_cast(V v) {
  if constexpr (kIsBool<Out>) {
    return v != V(0);
  } else if constexpr (std::is_same_v<Out, uint8_t> && std::is_floating_point_v<V>) {
    return static_cast<uint8_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<Out>(static_cast<opmath_t<Out>>(v));
  }
}

// One input of a contiguous run: a pointer, or (Scalar) a value loaded once before the loop.
template <typename T, bool Scalar>
struct Src {
  const T* p;
  opmath_t<T> v{};
  explicit Src(const char* ptr) : p(reinterpret_cast<const T*>(ptr)) {
    if constexpr (Scalar) v = static_cast<opmath_t<T>>(*p);
  }
  opmath_t<T> operator[](int64_t i) const {
    if constexpr (Scalar)
      return v;
    else
      return static_cast<opmath_t<T>>(p[i]);
  }
};

// Bit k of Mask set: input k is broadcast (stride 0) in this run; otherwise it is contiguous.
template <unsigned Mask, typename Out, typename... Ins, typename F, size_t... I>
void contiguous_run(Out* __restrict o, const char* const* in, int64_t n, const F& f, std::index_sequence<I...>) {
  std::tuple<Src<Ins, ((Mask >> I) & 1u) != 0>...> src{Src<Ins, ((Mask >> I) & 1u) != 0>(in[I])...};
  for (int64_t i = 0; i < n; i++) o[i] = out_cast<Out>(f(std::get<I>(src)[i]...));
}

// Outputs at least this large bypass the caches (non-temporal stores): they would not stay cached
// anyway, and skipping the read-for-ownership of every output line saves a quarter of the traffic
// of a binary op (measured: add of 16M float32 12-14 GB/s against 8-9 without).
constexpr int64_t kStreamBytes = 16 << 20;

// contiguous_run for large outputs: computes 2 KiB chunks into an L1 buffer (the same vectorized
// loop) and streams each chunk out.
template <unsigned Mask, typename Out, typename... Ins, typename F, size_t... I>
void contiguous_stream(Out* o, const char* const* in, int64_t n, const F& f, std::index_sequence<I...> seq) {
#if defined(__SSE2__)
  constexpr int64_t kChunk = 2048 / sizeof(Out);
  alignas(64) Out buf[kChunk];
  int64_t head = std::min<int64_t>(n, (-reinterpret_cast<uintptr_t>(o) & 15) / sizeof(Out));
  if (reinterpret_cast<uintptr_t>(o) % sizeof(Out) != 0) head = n;  // cannot align: plain stores
  contiguous_run<Mask, Out, Ins...>(o, in, head, f, seq);
  int64_t i = head;
  for (; n - i >= kChunk; i += kChunk) {
    const char* chunk_in[] = {in[I] + (((Mask >> I) & 1u) ? 0 : i * (int64_t)sizeof(Ins))...};
    contiguous_run<Mask, Out, Ins...>(buf, chunk_in, kChunk, f, seq);
    auto* dst = reinterpret_cast<__m128i*>(o + i);
    const auto* src = reinterpret_cast<const __m128i*>(buf);
    for (size_t k = 0; k < sizeof(buf) / 16; k++) _mm_stream_si128(dst + k, _mm_load_si128(src + k));
  }
  const char* tail_in[] = {in[I] + (((Mask >> I) & 1u) ? 0 : i * (int64_t)sizeof(Ins))...};
  contiguous_run<Mask, Out, Ins...>(o + i, tail_in, n - i, f, seq);
  _mm_sfence();
#else
  contiguous_run<Mask, Out, Ins...>(o, in, n, f, seq);
#endif
}

template <typename Out, typename... Ins, typename F, size_t... I>
void strided_run(char* o, int64_t so, const char* const* in, const int64_t* s, int64_t n, const F& f,
                 std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; i++)
    *reinterpret_cast<Out*>(o + i * so) =
        out_cast<Out>(f(static_cast<opmath_t<Ins>>(*reinterpret_cast<const Ins*>(in[I] + i * s[I]))...));
}

// An operand read across its dense dimension (a transposed view: last dim strided by at least a
// cache line, next-to-last dim dense) makes row-by-row traversal fetch a cache line per element.
template <size_t N>
bool wants_tiles(const Shape& shape, const std::array<Shape, N>& st) {
  size_t d = shape.size();
  if (d < 2 || shape[d - 1] < 16 || shape[d - 2] < 16) return false;
  for (size_t k = 1; k < N; k++) {
    int64_t inner = std::abs(st[k][d - 1]), next = std::abs(st[k][d - 2]);
    if (inner >= 64 && next != 0 && next < inner) return true;
  }
  return false;
}

// Visits the last two dims in 32 x 64 tiles (runs of at most 64 along the last dim), so the lines
// of a transposed operand are reused from L1; tiles are split across threads.
template <size_t N, typename F>
void tiled_loop(const Shape& shape, const std::array<char*, N>& base, const std::array<Shape, N>& st, const F& fn) {
  constexpr int64_t kRows = 32, kCols = 64;
  int64_t nd = (int64_t)shape.size(), rows = shape[nd - 2], cols = shape[nd - 1];
  int64_t row_blocks = (rows + kRows - 1) / kRows, outer = shape_numel(Shape(shape.begin(), shape.end() - 2));
  std::array<int64_t, N> s;
  for (size_t k = 0; k < N; k++) s[k] = st[k][nd - 1];
  int64_t grain = std::max<int64_t>(1, 32768 / (kRows * cols));
  parallel_for(0, outer * row_blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; blk++) {
      int64_t o = blk / row_blocks, r0 = (blk % row_blocks) * kRows, r1 = std::min(rows, r0 + kRows);
      std::array<char*, N> p0 = base;
      for (int64_t d = nd - 3; d >= 0; d--) {
        for (size_t k = 0; k < N; k++) p0[k] += (o % shape[d]) * st[k][d];
        o /= shape[d];
      }
      for (int64_t c0 = 0; c0 < cols; c0 += kCols)
        for (int64_t r = r0; r < r1; r++) {
          std::array<char*, N> p;
          for (size_t k = 0; k < N; k++) p[k] = p0[k] + r * st[k][nd - 2] + c0 * s[k];
          fn(p, s, std::min(kCols, cols - c0));
        }
    }
  });
}

template <typename Out, typename... Ins, typename F>
void map(const Tensor& out, const std::array<Tensor, sizeof...(Ins)>& in, const F& f) {
  constexpr size_t N = sizeof...(Ins) + 1;
  using Seq = std::index_sequence_for<Ins...>;
  const Shape& shape = out.sizes();
  std::array<char*, N> base;
  std::array<Shape, N> strides;
  base[0] = static_cast<char*>(out.data_ptr());
  strides[0] = broadcast_byte_strides(out, shape);
  for (size_t k = 0; k + 1 < N; k++) {
    base[k + 1] = static_cast<char*>(in[k].data_ptr());
    strides[k + 1] = broadcast_byte_strides(in[k], shape);
  }
  constexpr int64_t sizes[N] = {(int64_t)sizeof(Out), (int64_t)sizeof(Ins)...};
  bool stream = out.numel() * (int64_t)sizeof(Out) >= kStreamBytes;
  auto run = [&](std::array<char*, N> p, std::array<int64_t, N> s, int64_t n) {
    unsigned mask = 0;
    bool fast = s[0] == sizes[0];
    for (size_t k = 1; k < N; k++) {
      if (s[k] == 0)
        mask |= 1u << (k - 1);
      else
        fast = fast && s[k] == sizes[k];
    }
    Out* o = reinterpret_cast<Out*>(p[0]);
    if (fast && mask == 0) {
      if (stream) return contiguous_stream<0, Out, Ins...>(o, &p[1], n, f, Seq{});
      return contiguous_run<0, Out, Ins...>(o, &p[1], n, f, Seq{});
    }
    if constexpr (N == 3) {  // binary ops with one broadcast operand (x + 1, x * w[j])
      if (fast && mask == 1)
        return stream ? contiguous_stream<1, Out, Ins...>(o, &p[1], n, f, Seq{}) : contiguous_run<1, Out, Ins...>(o, &p[1], n, f, Seq{});
      if (fast && mask == 2)
        return stream ? contiguous_stream<2, Out, Ins...>(o, &p[1], n, f, Seq{}) : contiguous_run<2, Out, Ins...>(o, &p[1], n, f, Seq{});
    }
    strided_run<Out, Ins...>(p[0], s[0], &p[1], &s[1], n, f, Seq{});
  };
  if (wants_tiles(shape, strides))
    tiled_loop<N>(shape, base, strides, run);
  else
    strided_loop<N>(shape, base, strides, run);
}

}  // namespace tc::cpu
