// CPU kernels of the random ops (stdlib/cpu/random.cpp), called by the creation group. Each
// fills a contiguous tensor from a fresh reservation of the Philox stream (tc/random.h documents
// the mapping); the arguments have been checked by the meta rules.
#pragma once
#include "tc/random.h"

namespace tc::cpu {

void random_uniform(const Tensor& out, double from, double to);
void random_normal(const Tensor& out, double mean, double std);
void random_int(const Tensor& out, int64_t low, int64_t high);
// p_tensor: per-element probabilities (out's shape, any float dtype; checked to lie in [0, 1]), or
// undefined to use p for every element.
void random_bernoulli(const Tensor& out, const Tensor& p_tensor, double p);
// probs: [categories] or [rows, categories]; out: int64 [num_samples] or [rows, num_samples],
// 1-based category indices.
void random_multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement);

}  // namespace tc::cpu
