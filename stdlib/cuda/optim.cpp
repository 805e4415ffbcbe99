// The optimizer-step ops on CUDA (multi-tensor apply): the tensors of the lists are cut into chunks
// of kChunk elements; one launch takes up to kMaxTensors parameters (with their grads and states),
// whose pointers, sizes and first chunk numbers travel in the kernel's parameter block (no upload),
// and each block finds its tensor by a binary search over the chunk numbers, then runs the update
// of stdlib/cpu/optim.h over its chunk. A step of 160 parameters is 3 launches. The step count
// and the learning rate, when they are CUDA tensors, are read by the kernel (so a recorded CUDA
// graph stays right when they change); else the host computes the step's scalars. Non-contiguous
// tensors go through contiguous copies.
#include <algorithm>

#include "cpu/optim.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kMaxLists = 5;
constexpr int kMaxTensors = 64;  // the parameter block stays under 4 KB
// (16384 elements a chunk made each block walk 64 dependent loads per thread: 0.44 ms for
// DenseNet-121's Adam step, 8M parameters in 6 launches on an H200; 2048 gives a block per ~8
// loads, enough blocks to fill the GPU)
constexpr int64_t kChunk = 1 << 11;
constexpr int kBlock = 256;

struct Table {
  int n = 0;
  int first_chunk[kMaxTensors + 1] = {};
  int64_t numel[kMaxTensors] = {};
  void* ptr[kMaxLists][kMaxTensors] = {};
};
static_assert(sizeof(Table) + sizeof(cpu::OptimHyper) + 16 < 4096, "kernel parameters over 4 KB");

std::string source(DType dt) {
  const std::string T = ctype(dt), A = mtype(dt);
  return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n" +
         "#define MAX_LISTS " + std::to_string(kMaxLists) + "\n#define MAX_TENSORS " + std::to_string(kMaxTensors) +
         "\n#define CHUNK " + std::to_string(kChunk) + "ll\n" + R"CUDA(
struct Table { int n; int first_chunk[MAX_TENSORS + 1]; i64 numel[MAX_TENSORS]; T* ptr[MAX_LISTS][MAX_TENSORS]; };
struct Hyper { double lr, weight_decay, a, b, c, d, eps, step; int maximize, flag1, flag2, alg; };
__device__ __forceinline__ A r(A x) { return ld(cvt<T>(x)); }  // rounded to T, as an op's result
extern "C" __global__ void optim_step(Table t, Hyper h, const double* step_dev, const double* lr_dev) {
  if (lr_dev) h.lr = *lr_dev;
  if (step_dev || lr_dev) {  // the step's scalars from the device's step count or lr
    double s = step_dev ? *step_dev : h.step;
    if (h.alg == 1 || h.alg == 2) { h.c = h.lr / (1 - pow(h.a, s)); h.d = sqrt(1 - pow(h.b, s)); }
    if (h.alg == 4) h.c = h.lr / (1 + (s - 1) * h.a);
  }
  const A wd = (A)h.weight_decay, eps = (A)h.eps;
  const bool has_wd = h.weight_decay != 0, maximize = h.maximize != 0;
  const int chunks = t.first_chunk[t.n];
  for (int c = blockIdx.x; c < chunks; c += gridDim.x) {
    int lo = 0, hi = t.n - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) >> 1;
      if (t.first_chunk[mid] <= c) lo = mid; else hi = mid - 1;
    }
    const i64 begin = (i64)(c - t.first_chunk[lo]) * CHUNK, end = min(begin + CHUNK, t.numel[lo]);
    T *p = t.ptr[0][lo], *gr = t.ptr[1][lo], *s0 = t.ptr[2][lo], *s1 = t.ptr[3][lo], *s2 = t.ptr[4][lo];
    for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
      A g = ld(gr[i]);
      if (maximize) g = -g;
      if (h.alg == 0) {  // SGD
        if (has_wd) g = g + wd * ld(p[i]);
        if (h.a != 0) {
          A mom = (A)h.a;
          A buf = h.flag2 ? g : r(ld(s0[i]) * mom) + (A)(1 - h.b) * g;
          s0[i] = cvt<T>(buf);
          buf = ld(s0[i]);
          g = h.flag1 ? g + mom * buf : buf;
        }
        p[i] = cvt<T>(ld(p[i]) + (A)(-h.lr) * g);
      } else if (h.alg == 1 || h.alg == 2) {  // Adam, AdamW
        A pv = ld(p[i]);
        if (has_wd) {
          if (h.alg == 2) pv = r(pv * (A)(1 - h.lr * h.weight_decay));
          else g = g + wd * pv;
        }
        // (the states as stored, kept in registers: no reload behind the stores)
        const A m = r(r(ld(s0[i]) * (A)h.a) + (A)(1 - h.a) * g);
        A v = r(r(ld(s1[i]) * (A)h.b) + (A)(1 - h.b) * r(g * g));
        s0[i] = cvt<T>(m); s1[i] = cvt<T>(v);
        if (h.flag1) {
          A mx = ld(s2[i]);
          v = (mx > v || mx != mx) ? mx : v;
          s2[i] = cvt<T>(v);
        }
        A denom = r(r(m_sqrt(v)) / (A)h.d) + eps;
        p[i] = cvt<T>(pv + (A)(-h.c) * r(m / r(denom)));
      } else if (h.alg == 3) {  // RMSprop
        if (has_wd) g = g + wd * ld(p[i]);
        const A alpha = (A)h.a, alpha1 = (A)(1 - h.a);
        A sq = r(ld(s0[i]) * alpha) + alpha1 * r(g * g);
        s0[i] = cvt<T>(sq);
        sq = ld(s0[i]);
        A avg;
        if (h.flag1) {
          A ga = r(ld(s2[i]) * alpha) + alpha1 * g;
          s2[i] = cvt<T>(ga);
          ga = ld(s2[i]);
          avg = m_sqrt(r(sq - r(ga * ga)));
        } else {
          avg = m_sqrt(sq);
        }
        avg = r(r(avg) + eps);
        if (h.b > 0) {
          A buf = r(ld(s1[i]) * (A)h.b) + r(g / avg);
          s1[i] = cvt<T>(buf);
          p[i] = cvt<T>(ld(p[i]) + (A)(-h.lr) * ld(s1[i]));
        } else {
          p[i] = cvt<T>(ld(p[i]) + (A)(-h.lr) * r(g / avg));
        }
      } else {  // Adagrad
        if (has_wd) g = g + wd * ld(p[i]);
        A sum = ld(s0[i]) + r(g * g);
        s0[i] = cvt<T>(sum);
        A denom = r(r(m_sqrt(ld(s0[i]))) + eps);
        p[i] = cvt<T>(ld(p[i]) + (A)(-h.c) * r(g / denom));
      }
    }
  }
}
)CUDA";
}

}  // namespace

bool fused_optim(Op op, const Stack& a, Stack* result) {
  cpu::OptimStep s = cpu::describe_optim(op, a);
  const TensorList& ps = *s.lists[0];
  const Tensor& first = ps[0];
  const int device = first.device().index;
  // a CUDA tensor's value as a double the kernel reads; a host value into h
  const double* step_dev = nullptr;
  const double* lr_dev = nullptr;
  Tensor step_copy, lr_copy;
  if (s.lr && s.lr->device().is_cuda()) {
    lr_copy = contiguous_as(*s.lr, DType::Float64);
    lr_dev = static_cast<const double*>(lr_copy.data_ptr());
  } else if (s.lr) {
    s.h.lr = cpu::step_value(*s.lr);
  }
  if (s.step && s.step->device().is_cuda()) {
    step_copy = contiguous_as(*s.step, DType::Float64);
    step_dev = static_cast<const double*>(step_copy.data_ptr());
  } else {
    s.set_step(s.step ? cpu::step_value(*s.step) : 0);  // (with lr_dev the kernel redoes it)
  }
  const size_t nl = s.lists.size(), n = ps.size();
  cpu::OptimWork w(s);
  auto& work = w.t;
  CUfunction f = kernels(device, std::string("optim_step:") + ctype(first.dtype()), [&] { return source(first.dtype()); },
                         {"optim_step"})[0];
  cpu::OptimHyper h = s.h;
  Table tab;
  int chunks = 0;
  auto flush = [&] {
    if (tab.n == 0) return;
    tab.first_chunk[tab.n] = chunks;
    unsigned grid = grid_for(int64_t(chunks) * kBlock, device, kBlock, 16);  // a block per chunk, at most 16 per SM
    void* args[] = {&tab, &h, &step_dev, &lr_dev};
    launch(device, f, grid, kBlock, args);
    tab = Table{};
    chunks = 0;
  };
  for (size_t i = 0; i < n; i++) {
    int64_t numel = work[0][i].numel();
    if (numel == 0) continue;
    int64_t need = (numel + kChunk - 1) / kChunk;
    if (tab.n == kMaxTensors || chunks + need > (int64_t(1) << 30)) flush();
    tab.first_chunk[tab.n] = chunks;
    tab.numel[tab.n] = numel;
    for (size_t l = 0; l < nl; l++)
      if (s.lists[l]) tab.ptr[l][tab.n] = work[l][i].data_ptr();
    tab.n++;
    chunks += int(need);
  }
  flush();
  w.finish();
  *result = {Value(first)};
  return true;
}

}  // namespace tc::cuda
