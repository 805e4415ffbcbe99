// For the stream tests: tens of milliseconds of GPU work queued in microseconds on the current
// stream (a chain of large float32 products, scaled so the values stay finite).
#pragma once
#include "tc/ops.h"

namespace tc::test {

inline Tensor long_gpu_work() {
  Tensor a = call1(Op::randn, {4096, 4096}, {{"device", Value(Device{DeviceType::CUDA, 0})}});
  Tensor x = a;
  for (int i = 0; i < 12; i++) x = call1(Op::mul, {call1(Op::mm, {x, a}), 1.0 / 64});
  return x;
}

}  // namespace tc::test
