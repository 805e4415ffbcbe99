// Library calls by name (cuda_library_calls.h).
#include "cuda_library_calls.h"

#include <cmath>
#include <cstring>
#include <mutex>

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

// cat(pieces, dim 2) -> batch_norm(eval) -> relu as one kernel: each output element reads its
// piece (a search over at most kMaxPieces channel ranges, kept in the kernel's parameters) and
// its channel's statistics; no concatenation is written. Four elements per thread (one 16-byte
// load and store) when every row of the image has a multiple of 4 elements and every pointer is
// 16-byte aligned.
constexpr int kMaxPieces = 48;
const char* kCatNormSource = R"(
struct TcPieces { const float* p[TC_MAX_PIECES]; int end[TC_MAX_PIECES]; int size[TC_MAX_PIECES]; };
__device__ __forceinline__ float tc_cat_norm_one(float v, int c, const float* w, const float* b, const float* rm,
                                                 const float* rv, float eps) {
  float s = w[c] / sqrtf(rv[c] + eps);
  float y = (v - rm[c]) * s + b[c];
  return y > 0.f ? y : 0.f;
}
__device__ __forceinline__ int tc_piece(const TcPieces& ps, int c) {
  int k = 0;
  while (c >= ps.end[k]) k++;
  return k;
}
extern "C" __global__ void tc_cat_norm_relu(TcPieces ps, const float* __restrict__ w, const float* __restrict__ b,
                                            const float* __restrict__ rm, const float* __restrict__ rv, float eps,
                                            float* __restrict__ out, int C, int HW, unsigned total) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    int hw = i % HW, t = i / HW, c = t % C, n = t / C;
    int k = tc_piece(ps, c), lc = c - (ps.end[k] - ps.size[k]);
    float v = ps.p[k][((long long)n * ps.size[k] + lc) * HW + hw];
    out[i] = tc_cat_norm_one(v, c, w, b, rm, rv, eps);
  }
}
extern "C" __global__ void tc_cat_norm_relu4(TcPieces ps, const float* __restrict__ w, const float* __restrict__ b,
                                             const float* __restrict__ rm, const float* __restrict__ rv, float eps,
                                             float* __restrict__ out, int C, int HW, unsigned total4) {
  for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < total4; q += gridDim.x * blockDim.x) {
    unsigned i = 4 * q;
    int hw = i % HW, t = i / HW, c = t % C, n = t / C;
    int k = tc_piece(ps, c), lc = c - (ps.end[k] - ps.size[k]);
    float4 v = *(const float4*)(ps.p[k] + ((long long)n * ps.size[k] + lc) * HW + hw);
    float4 y;
    y.x = tc_cat_norm_one(v.x, c, w, b, rm, rv, eps);
    y.y = tc_cat_norm_one(v.y, c, w, b, rm, rv, eps);
    y.z = tc_cat_norm_one(v.z, c, w, b, rm, rv, eps);
    y.w = tc_cat_norm_one(v.w, c, w, b, rm, rv, eps);
    *(float4*)(out + i) = y;
  }
}
// Channels-last pieces and result: element i is pixel i / C, channel i % C (a piece's pixel holds
// its size[k] channels); 4 channels per thread when every piece has a multiple of 4.
extern "C" __global__ void tc_cat_norm_relu_nhwc(TcPieces ps, const float* __restrict__ w, const float* __restrict__ b,
                                                 const float* __restrict__ rm, const float* __restrict__ rv, float eps,
                                                 float* __restrict__ out, int C, int HW, unsigned total) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    int c = i % C;
    unsigned pix = i / C;
    int k = tc_piece(ps, c), lc = c - (ps.end[k] - ps.size[k]);
    out[i] = tc_cat_norm_one(ps.p[k][(long long)pix * ps.size[k] + lc], c, w, b, rm, rv, eps);
  }
}
extern "C" __global__ void tc_cat_norm_relu_nhwc4(TcPieces ps, const float* __restrict__ w, const float* __restrict__ b,
                                                  const float* __restrict__ rm, const float* __restrict__ rv, float eps,
                                                  float* __restrict__ out, int C, int HW, unsigned total4) {
  for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < total4; q += gridDim.x * blockDim.x) {
    unsigned i = 4 * q;
    int c = i % C;
    unsigned pix = i / C;
    int k = tc_piece(ps, c), lc = c - (ps.end[k] - ps.size[k]);
    float4 v = *(const float4*)(ps.p[k] + (long long)pix * ps.size[k] + lc);
    float4 y;
    y.x = tc_cat_norm_one(v.x, c, w, b, rm, rv, eps);
    y.y = tc_cat_norm_one(v.y, c + 1, w, b, rm, rv, eps);
    y.z = tc_cat_norm_one(v.z, c + 2, w, b, rm, rv, eps);
    y.w = tc_cat_norm_one(v.w, c + 3, w, b, rm, rv, eps);
    *(float4*)(out + i) = y;
  }
}
)";
struct Pieces {  // the kernel's TcPieces
  const float* p[kMaxPieces];
  int end[kMaxPieces];
  int size[kMaxPieces];
};

bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// The kernel's work on float32 CUDA tensors of one image size, contiguous (or all channels-last
// with `channels_last`, out too); false: not such a case.
bool cat_norm_relu_kernel(const std::vector<Tensor>& pieces, const Tensor& w, const Tensor& b,
                          const Tensor& rm, const Tensor& rv, double eps, const Tensor& out,
                          bool channels_last) {
  const Tensor& p0 = pieces[0];
  if ((int)pieces.size() > kMaxPieces || p0.dim() != 4 || !p0.device().is_cuda() || out.numel() >= (int64_t(1) << 31))
    return false;
  Pieces ps{};
  int64_t C = 0;
  bool vec = (channels_last || p0.sizes()[2] * p0.sizes()[3] % 4 == 0) && aligned16(out.data_ptr());
  for (size_t k = 0; k < pieces.size(); k++) {
    const Tensor& t = pieces[k];
    const bool laid_out = channels_last ? tc::cuda::is_channels_last(t) : t.is_contiguous();
    vec = vec && (!channels_last || t.sizes()[1] % 4 == 0);
    if (t.dtype() != DType::Float32 || t.dim() != 4 || !laid_out || t.device() != p0.device() ||
        t.sizes()[0] != p0.sizes()[0] || t.sizes()[2] != p0.sizes()[2] ||
        t.sizes()[3] != p0.sizes()[3])
      return false;
    C += t.sizes()[1];
    ps.p[k] = (const float*)t.data_ptr();
    ps.end[k] = (int)C;
    ps.size[k] = (int)t.sizes()[1];
    vec = vec && aligned16(t.data_ptr());
  }
  for (const Tensor* t : {&w, &b, &rm, &rv})
    if (t->dtype() != DType::Float32 || t->dim() != 1 || t->numel() != C || !t->is_contiguous() || t->device() != p0.device())
      return false;
  const int device = p0.device().index;
  std::vector<CUfunction> f = tc::cuda::kernels(
      device, "tc_cat_norm_relu", [] { return "#define TC_MAX_PIECES " + std::to_string(kMaxPieces) + "\n" + kCatNormSource; },
      {"tc_cat_norm_relu", "tc_cat_norm_relu4", "tc_cat_norm_relu_nhwc", "tc_cat_norm_relu_nhwc4"});
  const void *wp = w.data_ptr(), *bp = b.data_ptr(), *mp = rm.data_ptr(), *vp = rv.data_ptr();
  void* op = out.data_ptr();
  float e = (float)eps;
  int Ci = (int)C, HW = (int)(p0.sizes()[2] * p0.sizes()[3]);
  unsigned total = (unsigned)(out.numel() / (vec ? 4 : 1));
  void* args[] = {&ps, &wp, &bp, &mp, &vp, &e, &op, &Ci, &HW, &total};
  tc::cuda::launch(device, f[(channels_last ? 2 : 0) + (vec ? 1 : 0)],
                   tc::cuda::grid_for(total, device), 256, args);
  return true;
}

const char* kCatNormPrefix = "cat + batch_norm + relu (one kernel), pieces: ";
const char* kCatNormLastPrefix = "cat + batch_norm + relu (one kernel, channels-last), pieces: ";
const char* kConvLastName = "conv2d (cuDNN, channels-last result)";

}  // namespace

std::shared_ptr<const capture::ExternalFn> relu_norm_backward_call() {
  static const std::shared_ptr<const capture::ExternalFn> fn = [] {
    auto fn = std::make_shared<capture::ExternalFn>();
    fn->name = "relu backward + batch_norm backward (one kernel)";
    fn->call = [](const Stack& in) {
      const Tensor &g = in[0].tensor(), &y = in[1].tensor();
      Stack b(in.begin() + 1, in.end());  // _batch_norm_backward's arguments, grad_out = g
      b[0] = Value(g);
      Stack out;
      if (!g.device().is_cuda() || !tc::cuda::batch_norm_backward(b, infer_meta(Op::_batch_norm_backward, b), &out, y)) {
        b[0] = Value(call1(Op::mul, {g, call1(Op::gt, {y, Value(0.0)})}));
        out = call(Op::_batch_norm_backward, b);
      }
      std::vector<Tensor> r;
      for (const Value& v : out) r.push_back(v.tensor());
      return r;
    };
    return fn;
  }();
  return fn;
}

std::shared_ptr<const capture::ExternalFn> norm_relu_call() {
  static const std::shared_ptr<const capture::ExternalFn> fn = [] {
    auto fn = std::make_shared<capture::ExternalFn>();
    fn->name = "batch_norm (batch statistics) + relu (one kernel)";
    fn->call = [](const Stack& in) {
      const Tensor& x0 = in[0].tensor();
      const Tensor x = x0.is_contiguous() ? x0 : call1(Op::contiguous, {x0});
      Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
      if (x.device().is_cuda() && tc::cuda::batch_norm_train(x, in, out, /*relu=*/true)) return std::vector<Tensor>{out};
      Stack bn(in.begin(), in.begin() + 8);
      Tensor y = call1(Op::batch_norm, bn, {{"num_batches_tracked", in.size() > 8 ? in[8] : Value()}});
      return std::vector<Tensor>{call1(Op::relu, {y})};
    };
    return fn;
  }();
  return fn;
}

std::shared_ptr<const capture::ExternalFn> cat_norm_relu_call(int pieces, bool channels_last) {
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = (channels_last ? kCatNormLastPrefix : kCatNormPrefix) + std::to_string(pieces);
  fn->call = [pieces, channels_last](const Stack& in) {
    std::vector<Tensor> ps;
    for (int k = 0; k < pieces; k++) {
      const Tensor& t = in[k].tensor();
      ps.push_back(channels_last && t.dim() == 4 && t.dtype() == DType::Float32 ? tc::cuda::as_channels_last(t) : t);
    }
    const Tensor &w = in[pieces].tensor(), &b = in[pieces + 1].tensor(), &rm = in[pieces + 2].tensor(),
                 &rv = in[pieces + 3].tensor();
    const double eps = in[pieces + 4].to_double();
    const Tensor& p0 = ps[0];
    int64_t C = 0;
    for (const Tensor& t : ps) C += t.dim() == 4 ? t.sizes()[1] : 0;
    if (p0.dim() == 4) {
      const Shape shape{p0.sizes()[0], C, p0.sizes()[2], p0.sizes()[3]};
      Tensor out = channels_last ? tc::cuda::empty_channels_last(shape, p0.dtype(), p0.device())
                                 : Tensor::empty(shape, p0.dtype(), p0.device());
      if (cat_norm_relu_kernel(ps, w, b, rm, rv, eps, out, channels_last))
        return std::vector<Tensor>{out};
    }
    Tensor x = call1(Op::cat, {Value(TensorList(ps)), (int64_t)2});  // dims are 1-based
    Tensor y = call1(Op::batch_norm, {x, w, b, rm, rv, false, 0.1, eps});
    return std::vector<Tensor>{call1(Op::relu, {y})};
  };
  return fn;
}

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

std::shared_ptr<const capture::ExternalFn> conv2d_channels_last_call() {
  // One per call site: what the call works out from shapes alone (tc::cuda::ConvLast) is kept
  // while the inputs' sizes and dtypes and the constant arguments stay (every call of a static
  // graph), so a call allocates its result and runs the library, nothing else.
  struct Kept {
    std::mutex mu;
    bool valid = false;
    Shape x, w;
    DType xt{}, wt{}, bt{};
    bool bias = false;
    Stack constants;  // stride, padding, dilation, groups
    std::shared_ptr<const tc::cuda::ConvLast> c;
  };
  auto same = [](const Value& a, const Value& b) {  // (the kinds these arguments take)
    if (a.is_int() && b.is_int()) return a.to_int() == b.to_int();
    if (a.is_string() && b.is_string()) return a.str() == b.str();
    if (a.is_int_list() && b.is_int_list()) return a.ints() == b.ints();
    return a.is_none() && b.is_none();
  };
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = kConvLastName;
  fn->call = [kept = std::make_shared<Kept>(), same](const Stack& in) {
    const Tensor &x = in[0].tensor(), &w = in[1].tensor();
    const bool bias = !in[2].is_none();
    std::shared_ptr<const tc::cuda::ConvLast> c;
    {
      std::lock_guard<std::mutex> lock(kept->mu);
      bool hit = kept->valid && x.sizes() == kept->x && w.sizes() == kept->w && x.dtype() == kept->xt &&
                 w.dtype() == kept->wt && bias == kept->bias && (!bias || in[2].tensor().dtype() == kept->bt);
      for (size_t i = 3; hit && i < 7; i++) hit = same(in[i], kept->constants[i - 3]);
      if (!hit) {
        kept->c = std::make_shared<const tc::cuda::ConvLast>(tc::cuda::conv2d_channels_last_setup(in));
        kept->x = x.sizes(), kept->w = w.sizes(), kept->xt = x.dtype(), kept->wt = w.dtype(), kept->bias = bias;
        if (bias) kept->bt = in[2].tensor().dtype();
        kept->constants.assign(in.begin() + 3, in.begin() + 7);
        kept->valid = true;
      }
      c = kept->c;
    }
    return std::vector<Tensor>{tc::cuda::conv2d_channels_last(in, *c)};
  };
  return fn;
}

std::shared_ptr<const capture::ExternalFn> library_call(const std::string& name) {
  if (name == attention_merged_heads_call()->name) return attention_merged_heads_call();
  if (name == norm_relu_call()->name) return norm_relu_call();
  if (name == relu_norm_backward_call()->name) return relu_norm_backward_call();
  if (name == kConvLastName) return conv2d_channels_last_call();
  for (bool last : {false, true}) {
    const char* prefix = last ? kCatNormLastPrefix : kCatNormPrefix;
    if (name.rfind(prefix, 0) != 0) continue;
    const int pieces = std::atoi(name.c_str() + std::strlen(prefix));
    if (pieces >= 1 && cat_norm_relu_call(pieces, last)->name == name)
      return cat_norm_relu_call(pieces, last);
  }
  for (Act act : {Act::None, Act::Relu, Act::GeluTanh})
    for (bool bias : {false, true})
      for (bool residual : {false, true}) {
        std::shared_ptr<const capture::ExternalFn> fn = linear_act_call(act, bias, residual);
        if (fn->name == name) return fn;
      }
  return nullptr;
}

}  // namespace tc::backends::cuda
