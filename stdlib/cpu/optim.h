// The optimizer-step ops of ops.def (_fused_sgd_, _fused_adam_, _fused_adamw_, _fused_rmsprop_,
// _fused_adagrad_): their arguments read into one description, shared by the meta rule and the
// CPU kernel (stdlib/cpu/nn_optim.cpp) and the CUDA kernel (stdlib/cuda/optim.cpp).
//
// Every algorithm is tc.optim's per-parameter one (stdlib/lua/tc.optim.lua), element by element,
// in the same order of roundings: each op of the Lua code rounds to the parameter's dtype there,
// each step of the formula rounds to the compute type (float32 for float32/float16/bfloat16,
// float64 for float64) here; the scalars (bias corrections, step sizes) are computed in double
// on the host as the Lua code computes them.
#pragma once
#include <cmath>
#include <vector>

#include "tc/ops.h"

namespace tc::cpu {

// The case labels of the five ops.
#define TC_FUSED_OPTIM_OPS \
  case Op::_fused_sgd_:    \
  case Op::_fused_adam_:   \
  case Op::_fused_adamw_:  \
  case Op::_fused_rmsprop_: \
  case Op::_fused_adagrad_

enum class OptimAlg : int { SGD = 0, Adam = 1, AdamW = 2, RMSprop = 3, Adagrad = 4 };

// The scalars of one step, the same struct on the host and (as `struct Hyper` of the generated
// source) on the device: doubles, then ints (flags).
struct OptimHyper {
  double lr = 0, weight_decay = 0;
  double a = 0, b = 0, c = 0, d = 0;  // per algorithm, see `describe_optim`
  double eps = 0;
  double step = 0;  // the step count (Adam, AdamW, Adagrad)
  int maximize = 0, flag1 = 0, flag2 = 0, alg = 0;
};

struct OptimStep {
  OptimAlg alg;
  // lists[0] params, lists[1] grads, lists[2...] the algorithm's state lists (empty: unused)
  std::vector<const TensorList*> lists;
  const Tensor* step = nullptr;  // Adam, AdamW, Adagrad: the step count after this step
  const Tensor* lr = nullptr;    // the learning rate when it is a 0-dim tensor (else h.lr)
  OptimHyper h;
  // The step-dependent scalars from h.lr and the step count (host side).
  void set_step(double step);
};

// The tensors of the lists as contiguous ones, t[list][i]: the tensor itself, or a contiguous copy
// (any device); finish() copies the written copies back and bumps the written tensors' versions.
class OptimWork {
 public:
  explicit OptimWork(const OptimStep& s);
  void finish();
  std::vector<std::vector<Tensor>> t;

 private:
  const OptimStep& s_;
  std::vector<std::pair<Tensor, Tensor>> back_;  // (original, contiguous copy)
};

// Reads (and checks: the meta rule) the arguments of one of the five ops. Layout of h:
//   SGD:     a momentum, b dampening; flag1 nesterov, flag2 first_step
//   Adam(W): a beta1, b beta2, c step_size = lr / (1 - beta1^step), d sqrt(1 - beta2^step);
//            flag1 amsgrad
//   RMSprop: a alpha, b momentum; flag1 centered
//   Adagrad: a lr_decay, c clr = lr / (1 + (step - 1) * lr_decay)
// `lr` is a number (h.lr) or a 0-dim tensor (lr: its value not read here). The step-dependent
// scalars are not set (set_step, once the values of `step` and a tensor `lr` are known).
OptimStep describe_optim(Op op, const Stack& a);
TensorMeta fused_optim_meta(Op op, const Stack& a);
Tensor fused_optim_kernel(Op op, const Stack& a, const TensorMeta& m);
// The value of a `step` or `lr` argument (a number or a 0-dim tensor on any device; read on the host).
double step_value(const Tensor& t);

}  // namespace tc::cpu
