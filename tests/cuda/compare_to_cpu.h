// Helpers of the CUDA tests that compare against the CPU in float64: moving a tensor to a dtype
// and device, random float64 tensors, and the error measure the tolerances are written for.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>

#include "tc/tensor.h"

namespace tc::test {

// A copy of t in dtype dt on device dev.
inline Tensor convert(const Tensor& t, DType dt, Device dev) {
  Tensor r = Tensor::empty(t.sizes(), dt, dev);
  r.copy_from(t);
  return r;
}

// Standard normal float64 values on the CPU.
inline Tensor randn_f64(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::empty(s, DType::Float64);
  std::normal_distribution<double> d;
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = d(rng);
  return t;
}

// max |ref - got| / max(1, max |ref|), with ref a float64 CPU tensor; NaN in got gives NaN.
inline double max_rel_err(const Tensor& ref, const Tensor& got) {
  Tensor g = convert(got, DType::Float64, Device{});
  double scale = 1, err = 0;
  for (int64_t i = 0; i < ref.numel(); i++) scale = std::max(scale, std::abs(ref.data<double>()[i]));
  for (int64_t i = 0; i < ref.numel(); i++) {
    double d = std::abs(ref.data<double>()[i] - g.data<double>()[i]);
    if (!(d <= err)) err = d;  // NaN wins
  }
  return err / scale;
}

}  // namespace tc::test
