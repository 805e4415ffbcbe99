// Library calls by name (cuda_library_calls.h).
#include "cuda_library_calls.h"

#include <cmath>

#include "cuda/runtime.h"

namespace tc::backends::cuda {
namespace {

using tc::cuda::Act;

// The eager composition (what the call runs when cuBLASLt declines).
Tensor unfused(const Tensor& x, const Tensor& w, const Tensor& b, Act act, const Tensor& r) {
  Tensor y = call1(Op::linear, {x, w, b.defined() ? Value(b) : Value()});
  if (act == Act::Relu) y = call1(Op::relu, {y});
  if (act == Act::GeluTanh) y = call1(Op::gelu, {y}, {{"approximate", std::string("tanh")}});
  if (r.defined()) y = call1(Op::add, {r, y});
  return y;
}

}  // namespace

std::shared_ptr<const capture::ExternalFn> linear_act_call(Act act, bool bias, bool residual) {
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = std::string("linear") + (bias ? " + bias" : "") +
             (act == Act::Relu ? " + relu" : act == Act::GeluTanh ? " + gelu(tanh)" : "") +
             (residual ? " + residual" : "") + " (cuBLASLt epilogue)";
  fn->call = [act, bias, residual](const Stack& in) {
    const Tensor& x = in[0].tensor();
    const Tensor& w = in[1].tensor();
    const Tensor b = bias ? in[2].tensor() : Tensor();
    const Tensor r = residual ? in[bias ? 3 : 2].tensor() : Tensor();
    Shape shape(x.sizes().begin(), x.sizes().end() - 1);
    shape.push_back(w.sizes()[0]);
    Tensor out = Tensor::empty(shape, x.dtype(), x.device());
    const Tensor xc = x.is_contiguous() ? x : call1(Op::contiguous, {x});
    const Tensor bc = b.defined() && b.strides()[0] != 1 ? call1(Op::contiguous, {b}) : b;
    const Tensor rc = r.defined() && !r.is_contiguous() ? call1(Op::contiguous, {r}) : r;
    if (tc::cuda::linear_act(out, xc, w, bc, act, rc)) return std::vector<Tensor>{out};
    return std::vector<Tensor>{unfused(x, w, b, act, r)};
  };
  return fn;
}

std::shared_ptr<const capture::ExternalFn> attention_merged_heads_call() {
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = "scaled_dot_product_attention, heads merged (fused attention)";
  fn->call = [](const Stack& in) {
    const Tensor &q = in[0].tensor(), &k = in[1].tensor(), &v = in[2].tensor();
    const bool causal = in[3].to_bool();
    const int64_t B = q.sizes()[0], H = q.sizes()[1], L = q.sizes()[2], E = q.sizes()[3];
    const double scale = in[4].is_none() ? 1.0 / std::sqrt((double)E) : in[4].to_double();
    Tensor out = Tensor::empty({B, L, H * E}, q.dtype(), q.device());
    // [B, H, L, E] viewed on the merged layout: head h of row l at columns h * E ..
    if (tc::cuda::flash_attention(q, k, v, causal, scale, out.as_strided({B, H, L, E}, {L * H * E, E, H * E, 1}, 0)))
      return std::vector<Tensor>{out};
    Tensor y = call1(Op::scaled_dot_product_attention, {q, k, v, Value(), 0.0, causal, in[4]});
    Tensor t = call1(Op::transpose, {y, (int64_t)2, (int64_t)3});  // dims are 1-based
    return std::vector<Tensor>{call1(Op::reshape, {t, IntList{B, L, H * E}})};
  };
  return fn;
}

std::shared_ptr<const capture::ExternalFn> library_call(const std::string& name) {
  if (name == attention_merged_heads_call()->name) return attention_merged_heads_call();
  for (Act act : {Act::None, Act::Relu, Act::GeluTanh})
    for (bool bias : {false, true})
      for (bool residual : {false, true}) {
        std::shared_ptr<const capture::ExternalFn> fn = linear_act_call(act, bias, residual);
        if (fn->name == name) return fn;
      }
  return nullptr;
}

}  // namespace tc::backends::cuda
