// Matrix products with fused bias / relu / gelu(tanh) epilogues through cuBLASLt
// (tc/cuda_blaslt.h), dlopen'ed like cuBLAS in linalg.cpp; one plan (descriptors and the
// heuristic's algorithm) per problem, cached.
#include <cublasLt.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>
#include <algorithm>
#include <numeric>

#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda_blaslt.h"
#include "tc/cuda_cache.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

struct Lt {
  cublasStatus_t (*Create)(cublasLtHandle_t*);
  cublasStatus_t (*DescCreate)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*DescSet)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t);
  cublasStatus_t (*LayoutCreate)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*PrefCreate)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*PrefSet)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t);
  cublasStatus_t (*PrefDestroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*Heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                              cublasLtMatmulHeuristicResult_t[], int*);
  cublasStatus_t (*Matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                           const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);
  size_t (*Version)();
  bool ok = false;
  std::string why;
  cublasLtHandle_t handle[16] = {};
};

Lt& lt() {
  static Lt* l = [] {
    auto* l = new Lt{};
    if (const char* e = std::getenv("TC_CUBLASLT_DISABLE"); e && *e && std::strcmp(e, "0") != 0) {
      l->why = "disabled by TC_CUBLASLT_DISABLE";
      return l;
    }
    std::string errs;
    void* h = open_toolkit_library("libcublasLt.so.13", &errs);
    if (!h) {
      l->why = "cannot load cuBLASLt (libcublasLt.so.13): " + errs;
      return l;
    }
    auto get = [&](const char* name, auto& fp) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      return fp != nullptr;
    };
    l->ok = get("cublasLtCreate", l->Create) && get("cublasLtMatmulDescCreate", l->DescCreate) &&
            get("cublasLtMatmulDescSetAttribute", l->DescSet) && get("cublasLtMatrixLayoutCreate", l->LayoutCreate) &&
            get("cublasLtMatmulPreferenceCreate", l->PrefCreate) &&
            get("cublasLtMatmulPreferenceSetAttribute", l->PrefSet) &&
            get("cublasLtMatmulPreferenceDestroy", l->PrefDestroy) &&
            get("cublasLtMatmulAlgoGetHeuristic", l->Heuristic) && get("cublasLtMatmul", l->Matmul) &&
            get("cublasLtGetVersion", l->Version);
    if (!l->ok) l->why = "cuBLASLt lacks entry points";
    return l;
  }();
  return *l;
}

std::mutex& mu() {
  static std::mutex m;
  return m;
}
int64_t g_calls = 0;

// A matrix operand: row-major with leading dimension ld, or transposed (column-major).
struct Operand {
  bool ok = false, trans = false;
  int64_t ld = 0;
};

Operand operand(const Tensor& t) {
  if (t.dim() != 2) return {};
  int64_t r = t.sizes()[0], c = t.sizes()[1], s0 = t.strides()[0], s1 = t.strides()[1];
  if (c == 1) s1 = 1;
  if (r == 1) s0 = std::max<int64_t>(c, 1);
  if (s1 == 1 && s0 >= std::max<int64_t>(c, 1)) return {true, false, s0};
  if (s0 == 1 && s1 >= std::max<int64_t>(r, 1)) return {true, true, s1};
  return {};
}

int alignment(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  for (int b : {16, 8, 4, 2})
    if (a % b == 0) return b;
  return 1;
}

cudaDataType data_type(DType t) {
  return t == DType::Float32 ? CUDA_R_32F : t == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
}

cublasLtEpilogue_t epilogue(Act act, bool bias) {
  switch (act) {
    case Act::None: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case Act::Relu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Act::GeluTanh: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// What picks a plan: everything the heuristic looks at.
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int, bool, bool, int, int,
                       int, int, int64_t, int>;  // ..., out's row stride, residual's alignment (0: none)

struct Plan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;  // never destroyed: the library may be gone at exit
  return *m;
}

constexpr size_t kMaxWorkspace = 32u << 20;
// Algorithms the heuristic proposes, timed once per plan. H100, GPT-2 small 8x256: 16 chose
// products as fast as 6 did (2.359 / 2.365 ms of cuBLASLt per call) and cost ~40 ms more per cold start.
constexpr int kCandidates = 6;
constexpr int kRuns = 5;         // timed runs of each

// How many of the heuristic's algorithms are timed: TC_BLASLT_TUNE=<n> (0 or 1: the heuristic's
// first, untimed), else kCandidates.
int candidates_timed() {
  static const int n = [] {
    const char* e = std::getenv("TC_BLASLT_TUNE");
    return e && *e ? std::clamp(std::atoi(e), 0, 64) : kCandidates;
  }();
  return n;
}

// Times each candidate on the call's own operands (out is written, then written again by the call
// itself) and keeps the fastest in p: cuBLASLt's first guess is not always its best (max-autotune,
// for the library's choices). Device time: one warm-up pass of every candidate measures the host's
// enqueue time, then a spin kernel keeps the device busy while every candidate's runs are enqueued
// between events, so the host's ~5-10 us per cublasLtMatmul never hides a small product's device
// time. The heuristic's first is kept unless another is 3% faster (a stable choice from run to
// run). Once per plan, outside CUDA graph capture.
void pick_fastest(Lt& l, int device, Plan& p, const std::vector<cublasLtMatmulHeuristicResult_t>& cands,
                  const float* alpha, const void* A, const void* B, const float* beta, const void* C, void* D) {
  size_t ws_bytes = 0;
  for (const auto& c : cands) ws_bytes = std::max(ws_bytes, c.workspaceSize);
  Tensor ws = ws_bytes ? Tensor::empty({(int64_t)ws_bytes}, DType::UInt8, Device{DeviceType::CUDA, device}) : Tensor();
  CUstream st = current(device);
  auto run = [&](const cublasLtMatmulHeuristicResult_t& c) {
    return l.Matmul(l.handle[device], p.desc, alpha, A, p.la, B, p.lb, beta, C, p.ld, D, p.ld, &c.algo,
                    ws_bytes ? ws.data_ptr() : nullptr, c.workspaceSize, st) == CUBLAS_STATUS_SUCCESS;
  };
  std::vector<char> ok(cands.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cands.size(); i++) ok[i] = run(cands[i]);  // warm-up; a failing one is dropped
  const double enqueue_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() * kRuns;
  sync_stream(device);
  std::vector<CUevent> ev(2 * cands.size(), nullptr);
  for (CUevent& e : ev) check(drv().EventCreate(&e, CU_EVENT_DEFAULT), "cuBLASLt tuning event");
  spin(device, std::min(50e3, 1.5 * enqueue_us + 100));
  for (size_t i = 0; i < cands.size(); i++) {
    if (!ok[i]) continue;
    drv().EventRecord(ev[2 * i], st);
    for (int r = 0; r < kRuns && ok[i]; r++) ok[i] = run(cands[i]);
    drv().EventRecord(ev[2 * i + 1], st);
  }
  sync_stream(device);
  std::vector<double> ms(cands.size(), 1e30);
  for (size_t i = 0; i < cands.size(); i++) {
    float t = 1e30f;
    if (ok[i]) drv().EventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]);
    ms[i] = t;
  }
  for (CUevent e : ev) drv().EventDestroy(e);
  const size_t pick = fastest_keeping_first(ms, cands.size(), 1.03, ok[0]);
  if (ok[pick]) p.algo = cands[pick].algo, p.workspace = cands[pick].workspaceSize;
}

// The disk cache's name for a plan's timed choice: the problem (Key), the device, the library's
// version and how many candidates were timed.
std::string choice_key(Lt& l, const Key& key, int device) {
  // (appended piece by piece: GCC 12 warns falsely, -Wrestrict, on "literal" + std::string)
  std::string k = "blaslt1 ";
  auto add = [&](const std::string& piece) {
    k += piece;
    k += ' ';
  };
  add(dev(device).name);
  add(std::to_string(l.Version()));
  add(std::to_string(candidates_timed()));
  std::apply([&](const auto&... v) { (add(std::to_string(v)), ...); }, key);
  return k;
}

// The timed choice for `key` from the disk cache, when it is one of this run's candidates (the
// heuristic still proposes it: same library, same problem); else the candidates are timed
// (pick_fastest) and the choice stored.
void choose(Lt& l, const Key& key, int device, Plan& p, const std::vector<cublasLtMatmulHeuristicResult_t>& cands,
            const float* alpha, const void* A, const void* B, const float* beta, const void* C, void* D) {
  const std::string ck = choice_key(l, key, device);
  const std::string hit = read_cache_entry("blaslt", ck);
  for (const auto& c : cands)
    if (hit.size() == sizeof c.algo && std::memcmp(hit.data(), &c.algo, sizeof c.algo) == 0) {
      p.algo = c.algo, p.workspace = c.workspaceSize;
      return;
    }
  pick_fastest(l, device, p, cands, alpha, A, B, beta, C, D);
  write_cache_entry("blaslt", ck, std::string(reinterpret_cast<const char*>(&p.algo), sizeof p.algo));
}

// Rows whose byte length is not a multiple of 16 (GPT-2's LM head: rows of 50257 floats) start
// at addresses that allow only cuBLASLt's slowest (align1) kernels: 1.2 ms for GPT-2's head on an
// H100. Every g-th row starts at the same address modulo 16 bytes (g = 16 / gcd(row bytes, 16)),
// so the product runs as g products over rows j, j + g, j + 2g, ... (row stride g * n: aligned),
// each from its first 16-byte aligned column c_j on and over a multiple of 16 columns (cuBLASLt
// takes its Hopper kernels only for such widths: one such group product 0.14 ms against 0.30 for
// a width of 50257 - 3), after two narrow products write columns [0, max c_j) and the last
// columns the groups leave out, of every row (the later products overwrite the columns they
// share with them). Large products without bias or residual only (the bias pointer would shift by
// c_j too); TC_BLASLT_ROW_GROUPS=0 turns this off.
bool row_groups(const Tensor& o2, const Tensor& x2, const Tensor& wt, Act act) {
  static const bool off = [] {
    const char* e = std::getenv("TC_BLASLT_ROW_GROUPS");
    return e && *e == '0';
  }();
  const int64_t rows = o2.sizes()[0], n = o2.sizes()[1], k = x2.sizes()[1], item = (int64_t)o2.itemsize();
  const int64_t row_bytes = n * item, g = 16 / std::gcd<int64_t>(row_bytes, 16);
  constexpr int64_t kWidthMultiple = 16;
  if (off || g == 1 || rows < 4 * g || n < 4 * kWidthMultiple || rows * n < (1 << 22) || compile_only()) return false;
  const auto addr = reinterpret_cast<uintptr_t>(o2.data_ptr());
  if (addr % item != 0) return false;
  int64_t first[16], width[16], narrow = 0, tail = 0;
  for (int64_t j = 0; j < g; j++) {
    first[j] = (int64_t)((16 - (addr + (uintptr_t)(j * row_bytes)) % 16) % 16) / item;
    width[j] = (n - first[j]) / kWidthMultiple * kWidthMultiple;
    narrow = std::max(narrow, first[j]);
    tail = std::max(tail, n - first[j] - width[j]);
  }
  // columns [c0, c0 + w) of every row
  auto columns = [&](int64_t c0, int64_t w) {
    return matmul_act(o2.as_strided({rows, w}, {n, 1}, o2.offset() + c0), x2,
                      wt.as_strided({k, w}, wt.strides(), wt.offset() + c0 * wt.strides()[1]), Tensor(), act);
  };
  if ((narrow > 0 && !columns(0, narrow)) || (tail > 0 && !columns(n - tail, tail))) return false;
  for (int64_t j = 0; j < g; j++) {
    const int64_t m = (rows - j + g - 1) / g, c = first[j];
    const Tensor o = o2.as_strided({m, width[j]}, {g * n, 1}, o2.offset() + j * n + c);
    const Tensor a = x2.as_strided({m, k}, {g * x2.strides()[0], x2.strides()[1]}, x2.offset() + j * x2.strides()[0]);
    const Tensor b = wt.as_strided({k, width[j]}, wt.strides(), wt.offset() + c * wt.strides()[1]);
    if (!matmul_act(o, a, b, Tensor(), act)) return false;
  }
  return true;
}

}  // namespace

bool blaslt_available(std::string* why) {
  Lt& l = lt();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

int64_t blaslt_calls() { return g_calls; }

bool matmul_act(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, Act act) {
  return matmul_act(out, a, b, bias, act, Tensor());
}

bool matmul_act(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, Act act,
                const Tensor& residual) {
  const DType dt = out.dtype();
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16) return false;
  if (a.dtype() != dt || b.dtype() != dt || (bias.defined() && bias.dtype() != dt)) return false;
  if (!out.device().is_cuda() || a.device() != out.device() || b.device() != out.device()) return false;
  if (out.dim() != 2 || compile_only()) return false;
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  if (b.sizes()[0] != k || out.sizes()[0] != m || out.sizes()[1] != n || m == 0 || n == 0 || k == 0) return false;
  // out: rows of unit stride, `ldo` apart (a padded leading dimension keeps the rows aligned)
  const int64_t ldo = m == 1 ? n : out.strides()[0];
  if ((n > 1 && out.strides()[1] != 1) || ldo < n) return false;
  // residual: added before the bias and the activation (D = act(a b + residual + bias)), laid out as out
  if (residual.defined() &&
      (residual.dtype() != dt || residual.device() != out.device() || residual.dim() != 2 ||
       residual.sizes() != out.sizes() || (m > 1 && residual.strides()[0] != ldo) || (n > 1 && residual.strides()[1] != 1)))
    return false;
  if (bias.defined() && (bias.dim() != 1 || bias.sizes()[0] != n || bias.strides()[0] != 1 || bias.device() != out.device()))
    return false;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return false;
  const Operand oa = operand(a), ob = operand(b);
  if (!oa.ok || !ob.ok) return false;
  Lt& l = lt();
  if (!l.ok) return false;
  const int device = out.device().index;
  if (device >= 16) return false;
  const bool tf32 = dt == DType::Float32 && allow_tf32();
  const void* bias_p = bias.defined() ? bias.data_ptr() : nullptr;
  const Key key{device, (int)dt, m, n, k, oa.trans, ob.trans, oa.ld, ob.ld, (int)act, bias_p != nullptr, tf32,
                alignment(a.data_ptr()), alignment(b.data_ptr()), alignment(out.data_ptr()),
                bias_p ? alignment(bias_p) : 16, ldo, residual.defined() ? alignment(residual.data_ptr()) : 0};
  std::lock_guard<std::mutex> lock(mu());
  if (!l.handle[device]) {
    dev(device);
    TC_CHECK(l.Create(&l.handle[device]) == CUBLAS_STATUS_SUCCESS, DeviceError, "cublasLtCreate failed");
  }
  auto [it, fresh] = plans().try_emplace(key);
  Plan& p = it->second;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  if (fresh) {
    const cudaDataType T = data_type(dt);
    const cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    // column-major: out^T (n x m) = op(b)^T . op(a)^T, b as cuBLASLt's A and a as its B
    const cublasOperation_t ta = ob.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = oa.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t ep = epilogue(act, bias_p != nullptr);
    bool ok = l.DescCreate(&p.desc, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              l.DescSet(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
              l.DescSet(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
              l.DescSet(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) == CUBLAS_STATUS_SUCCESS &&
              l.DescSet(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p, sizeof bias_p) == CUBLAS_STATUS_SUCCESS &&
              l.LayoutCreate(&p.la, T, ob.trans ? k : n, ob.trans ? n : k, ob.ld) == CUBLAS_STATUS_SUCCESS &&
              l.LayoutCreate(&p.lb, T, oa.trans ? m : k, oa.trans ? k : m, oa.ld) == CUBLAS_STATUS_SUCCESS &&
              l.LayoutCreate(&p.ld, T, n, m, ldo) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t pref = nullptr;
    if (ok && l.PrefCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
      const size_t ws = kMaxWorkspace;
      l.PrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      const int res_align = std::get<17>(key);
      const uint32_t al[4] = {(uint32_t)std::get<13>(key), (uint32_t)std::get<12>(key),
                              (uint32_t)(res_align ? std::min(res_align, std::get<14>(key)) : std::get<14>(key)),
                              (uint32_t)std::get<14>(key)};
      l.PrefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
      l.PrefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
      l.PrefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
      l.PrefSet(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
      cublasLtMatmulHeuristicResult_t r[64]{};
      int found = 0;
      ok = l.Heuristic(l.handle[device], p.desc, p.la, p.lb, p.ld, p.ld, pref, std::max(1, candidates_timed()), r, &found) ==
               CUBLAS_STATUS_SUCCESS &&
           found > 0 && r[0].state == CUBLAS_STATUS_SUCCESS;
      if (ok) p.algo = r[0].algo, p.workspace = r[0].workspaceSize;
      for (int i = 0; ok && i < found; i++)
        if (r[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(r[i]);
      l.PrefDestroy(pref);
    }
    p.ok = ok;
  }
  if (!p.ok) return false;
  TC_CHECK(l.DescSet(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p, sizeof bias_p) == CUBLAS_STATUS_SUCCESS,
           DeviceError, "cuBLASLt: setting the bias failed");
  const float alpha = 1, beta = residual.defined() ? 1 : 0;
  const void* c = residual.defined() ? residual.data_ptr() : out.data_ptr();
  if (candidates.size() > 1 && !capturing())
    choose(l, key, device, p, candidates, &alpha, b.data_ptr(), a.data_ptr(), &beta, c, out.data_ptr());
  Tensor ws;
  if (p.workspace) ws = Tensor::empty({(int64_t)p.workspace}, DType::UInt8, out.device());
  const cublasStatus_t st =
      l.Matmul(l.handle[device], p.desc, &alpha, b.data_ptr(), p.la, a.data_ptr(), p.lb, &beta, c, p.ld,
               out.data_ptr(), p.ld, &p.algo, p.workspace ? ws.data_ptr() : nullptr, p.workspace, current(device));
  TC_CHECK(st == CUBLAS_STATUS_SUCCESS, DeviceError, "cuBLASLt matmul failed (status %d, m=%lld n=%lld k=%lld)", (int)st,
           (long long)m, (long long)n, (long long)k);
  g_calls++;
  return true;
}

bool linear_act(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, Act act) {
  return linear_act(out, x, w, bias, act, Tensor());
}

bool linear_act(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, Act act,
                const Tensor& residual) {
  if (x.dim() < 1 || w.dim() != 2 || !out.is_contiguous() || !x.is_contiguous()) return false;
  if (residual.defined() && (!residual.is_contiguous() || residual.sizes() != out.sizes())) return false;
  const int64_t k = w.sizes()[1], n = w.sizes()[0];
  if (x.sizes().back() != k || out.sizes().back() != n) return false;
  const int64_t rows = x.numel() / std::max<int64_t>(k, 1);
  if (out.numel() != rows * n) return false;
  const Tensor x2 = x.as_strided({rows, k}, {k, 1}, x.offset());
  const Tensor wt = w.as_strided({k, n}, {w.strides()[1], w.strides()[0]}, w.offset());
  const Tensor o2 = out.as_strided({rows, n}, {n, 1}, out.offset());
  if (!residual.defined() && !bias.defined() && row_groups(o2, x2, wt, act)) return true;
  const Tensor r2 = residual.defined() ? residual.as_strided({rows, n}, {n, 1}, residual.offset()) : Tensor();
  return matmul_act(o2, x2, wt, bias, act, r2);
}

}  // namespace tc::cuda
