// The process-wide Philox generator and the CPU kernels of the random ops. Every element's value
// is a function of (seed, offset, element index) (tc/random.h documents the mapping), so the
// Philox blocks of an op are filled in parallel and the result ignores the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "random_kernels.h"
#include "tc/error.h"
#include "tc/parallel.h"

namespace tc {
namespace {

std::mutex g_mu;
RngState g_state;

constexpr double kTwoPi = 6.283185307179586;  // the double nearest 2 pi

template <typename T>
constexpr bool is_float_type =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Bits of a uniform in [0, 1) for each float dtype: its significand width.
template <typename T>
constexpr int uniform_width() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  if constexpr (std::is_same_v<T, BFloat16>) return 8;
  return 24;  // float32 (float64 uses uniform53)
}

// A double rounded to T: directly for float/double, through float for the 16-bit types.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else return static_cast<T>(static_cast<opmath_t<T>>(v));
}

// The largest T below `to` (used when rounding lands a uniform on its excluded upper bound).
template <typename T>
T largest_below(double to) {
  T v = from_double<T>(to);
  while ((double)static_cast<opmath_t<T>>(v) >= to) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      uint16_t b = v.bits;
      v.bits = (b & 0x7fff) == 0 ? 0x8001 : (b & 0x8000) ? b + 1 : b - 1;
    } else {
      v = std::nextafter(v, -std::numeric_limits<T>::infinity());
    }
  }
  return v;
}

// Reserves words_per_element * n words and calls fn(first, count, block) for every Philox block:
// block j holds elements first = j * per_block .. first + count - 1, per_block = 4 / words.
template <typename F>
void for_each_block(int64_t n, int words_per_element, F&& fn) {
  if (n == 0) return;
  RngState s = philox_reserve((uint64_t)n * words_per_element);
  int64_t per_block = 4 / words_per_element, nblocks = (n + per_block - 1) / per_block;
  parallel_for(0, nblocks, 2048, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; j++) {
      int64_t first = j * per_block;
      fn(first, std::min(per_block, n - first), philox_block(s, (uint64_t)j));
    }
  });
}

// bernoulli and bernoulli_mask: element i is `one` when word i * 2^-32 < p_i, else 0.
template <typename T>
void bernoulli_fill(T* out, int64_t n, const double* p, double p_all, double one) {
  T hit = from_double<T>(one), miss = from_double<T>(0);
  for_each_block(n, 1, [&](int64_t first, int64_t count, const PhiloxBlock& b) {
    for (int64_t k = 0; k < count; k++) {
      double pk = p ? p[first + k] : p_all;
      out[first + k] = (double)b.w[k] * 0x1p-32 < pk ? hit : miss;
    }
  });
}

}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard g(g_mu);
  g_state = RngState{seed, 0};
}

uint64_t initial_seed() {
  std::lock_guard g(g_mu);
  return g_state.seed;
}

RngState get_rng_state() {
  std::lock_guard g(g_mu);
  return g_state;
}

void set_rng_state(RngState s) {
  TC_CHECK(s.offset % 4 == 0, ValueError, "set_rng_state(): offset must be a multiple of 4, got %llu",
           (unsigned long long)s.offset);
  std::lock_guard g(g_mu);
  g_state = s;
}

RngState philox_reserve(uint64_t words) {
  std::lock_guard g(g_mu);
  RngState s = g_state;
  g_state.offset += (words + 3) / 4 * 4;
  return s;
}

Tensor bernoulli_mask(const Shape& sizes, double p_keep, DType dtype, double scale, Device device) {
  TC_CHECK(p_keep >= 0 && p_keep <= 1, ValueError, "bernoulli_mask(): p_keep must be in [0, 1], got %g", p_keep);
  TC_CHECK(device.is_cpu(), DeviceError, "bernoulli_mask(): no kernel for device %s yet", device.str().c_str());
  Tensor out = Tensor::empty(sizes, dtype, device);
  visit_dtype(dtype, [&]<typename T>() { bernoulli_fill<T>(out.data<T>(), out.numel(), nullptr, p_keep, scale); });
  return out;
}

namespace cpu {

void random_uniform(const Tensor& out, double from, double to) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (is_float_type<T>) {
      T* p = out.data<T>();
      T top = largest_below<T>(to);
      constexpr bool f64 = std::is_same_v<T, double>;
      for_each_block(out.numel(), f64 ? 2 : 1, [&](int64_t first, int64_t count, const PhiloxBlock& b) {
        for (int64_t k = 0; k < count; k++) {
          double u = f64 ? uniform53(b.w[2 * k], b.w[2 * k + 1]) : uniform_bits(b.w[k], uniform_width<T>());
          T v = from_double<T>(std::fma(u, to - from, from));
          p[first + k] = (double)static_cast<opmath_t<T>>(v) >= to && from < to ? top : v;
        }
      });
    } else {
      TC_ASSERT(false, "uniform of a non-float dtype");
    }
  });
}

void random_normal(const Tensor& out, double mean, double std) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (is_float_type<T>) {
      T* p = out.data<T>();
      constexpr bool f64 = std::is_same_v<T, double>;
      for_each_block(out.numel(), f64 ? 2 : 1, [&](int64_t first, int64_t count, const PhiloxBlock& b) {
        double z[4];
        for (int pair = 0; pair < (f64 ? 1 : 2); pair++) {
          double u1 = f64 ? uniform53(b.w[0], b.w[1]) : uniform_bits(b.w[2 * pair], 24);
          double u2 = f64 ? uniform53(b.w[2], b.w[3]) : uniform_bits(b.w[2 * pair + 1], 24);
          double r = std::sqrt(-2.0 * std::log(1.0 - u1)), theta = kTwoPi * u2;
          z[2 * pair] = r * std::cos(theta);
          z[2 * pair + 1] = r * std::sin(theta);
        }
        for (int64_t k = 0; k < count; k++) p[first + k] = from_double<T>(std::fma(z[k], std, mean));
      });
    } else {
      TC_ASSERT(false, "normal of a non-float dtype");
    }
  });
}

void random_int(const Tensor& out, int64_t low, int64_t high) {
  uint64_t range = (uint64_t)high - (uint64_t)low;
  bool wide = range > (1ull << 32);
  visit_dtype(out.dtype(), [&]<typename T>() {
    T* p = out.data<T>();
    for_each_block(out.numel(), wide ? 2 : 1, [&](int64_t first, int64_t count, const PhiloxBlock& b) {
      for (int64_t k = 0; k < count; k++) {
        uint64_t x = wide ? ((uint64_t)b.w[2 * k + 1] << 32 | b.w[2 * k]) : b.w[k];
        int64_t v = (int64_t)((uint64_t)low + x % range);
        if constexpr (std::is_integral_v<T>) p[first + k] = static_cast<T>(v);
        else p[first + k] = from_double<T>((double)v);
      }
    });
  });
}

void random_bernoulli(const Tensor& out, const Tensor& p_tensor, double p) {
  std::vector<double> probs;
  if (p_tensor.defined()) {
    Tensor pc = p_tensor.to(DType::Float64).contiguous();
    probs.assign(pc.data<double>(), pc.data<double>() + pc.numel());
    for (size_t i = 0; i < probs.size(); i++)
      TC_CHECK(probs[i] >= 0 && probs[i] <= 1, ValueError,
               "bernoulli(): probabilities must be in [0, 1], got %g at element %zu", probs[i], i + 1);
  }
  visit_dtype(out.dtype(), [&]<typename T>() {
    bernoulli_fill<T>(out.data<T>(), out.numel(), probs.empty() ? nullptr : probs.data(), p, 1.0);
  });
}

void random_multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement) {
  int64_t cats = probs.sizes().back(), rows = probs.dim() == 2 ? probs.sizes()[0] : 1;
  Tensor pc = probs.to(DType::Float64).contiguous();
  const double* p = pc.data<double>();
  // cdf[r * cats + c]: cumulative sums per row, in category order
  std::vector<double> cdf(rows * cats);
  for (int64_t r = 0; r < rows; r++) {
    double sum = 0;
    for (int64_t c = 0; c < cats; c++) {
      double v = p[r * cats + c];
      TC_CHECK(std::isfinite(v) && v >= 0, ValueError,
               "multinomial(): probability tensor contains either inf, nan or element < 0");
      cdf[r * cats + c] = sum += v;
    }
    TC_CHECK(sum > 0, ValueError, "multinomial(): invalid multinomial distribution (sum of probabilities <= 0)");
  }
  int64_t* o = out.data<int64_t>();
  if (replacement) {
    for_each_block(rows * num_samples, 2, [&](int64_t first, int64_t count, const PhiloxBlock& b) {
      for (int64_t k = 0; k < count; k++) {
        int64_t draw = first + k, r = draw / num_samples;
        const double* row = &cdf[r * cats];
        double target = uniform53(b.w[2 * k], b.w[2 * k + 1]) * row[cats - 1];
        int64_t c = std::upper_bound(row, row + cats, target) - row;
        while (c == cats || (c > 0 && p[r * cats + c] == 0)) c--;  // rounding at the very top
        o[draw] = c + 1;
      }
    });
    return;
  }
  RngState s = philox_reserve((uint64_t)rows * cats * 2);
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / cats), [&](int64_t rb, int64_t re) {
    std::vector<double> key(cats);
    std::vector<int64_t> order(cats);
    for (int64_t r = rb; r < re; r++) {
      PhiloxBlock b{};
      for (int64_t c = 0; c < cats; c++) {
        uint64_t draw = (uint64_t)(r * cats + c);
        if (c == 0 || draw % 2 == 0) b = philox_block(s, draw / 2);
        int lane = 2 * (int)(draw % 2);
        double u = uniform53(b.w[lane], b.w[lane + 1]), pr = p[r * cats + c];
        key[c] = pr == 0 ? INFINITY : -std::log(1.0 - u) / pr;
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + num_samples, order.end(), [&](int64_t x, int64_t y) {
        return key[x] < key[y] || (key[x] == key[y] && x < y);
      });
      for (int64_t j = 0; j < num_samples; j++) o[r * num_samples + j] = order[j] + 1;
    }
  });
}

}  // namespace cpu
}  // namespace tc
