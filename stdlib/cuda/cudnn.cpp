// Convolutions through cuDNN (legacy convolution API of cuDNN 8/9), dlopen'ed on first use:
// $TC_CUDNN_PATH (the library file or its folder), the toolkit's lib64, then the loader path.
// Nothing here needs cuDNN's headers: the few types, enums and entry points used are declared
// below (values as in cudnn_graph.h / cudnn_cnn.h of cuDNN 9). conv1d/conv2d run as
// cudnnConvolutionForward (conv1d as a 1 x W image), conv_transpose2d as
// cudnnConvolutionBackwardData of the forward convolution it transposes. Descriptors and the
// chosen algorithm are cached per problem (shape, dtype, parameters, TF32 setting); the algorithm
// is measured once by cudnnFind*AlgorithmEx (TC_CUDNN_BENCHMARK=0: cuDNN's heuristics instead),
// and workspaces come from tc's caching allocator. float32 may use TF32 only when tc's float32
// matmul precision allows it (CUDNN_FMA_MATH otherwise). TC_CUDNN_DISABLE=1 (read on every call)
// makes every convolution take the im2col + cuBLAS path, so both can be tested in one process.
// stdlib/cuda/linalg.cpp times both paths on the first call of each problem and keeps the faster
// (TC_CONV_AUTOTUNE=0: cuDNN always).
#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda.h"

namespace tc::cuda {
namespace {

// ---- cuDNN declarations (C API, cuDNN 9) ---------------------------------------------------------
using Status = int;  // cudnnStatus_t: 0 = CUDNN_STATUS_SUCCESS
using Handle = struct cudnnContext*;
using TensorDesc = struct cudnnTensorStruct*;
using FilterDesc = struct cudnnFilterStruct*;
using ConvDesc = struct cudnnConvolutionStruct*;
enum DataType { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 9 };     // cudnnDataType_t
enum { kNCHW = 0 };                                                      // cudnnTensorFormat_t
enum { kCrossCorrelation = 1 };                                          // cudnnConvolutionMode_t
enum MathType { kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3 };    // cudnnMathType_t
struct AlgoPerf {  // cudnnConvolutionFwdAlgoPerf_t and cudnnConvolutionBwdDataAlgoPerf_t
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
};

struct Cudnn {
  size_t (*GetVersion)();
  const char* (*GetErrorString)(Status);
  Status (*Create)(Handle*);
  Status (*SetStream)(Handle, CUstream);
  Status (*CreateTensorDescriptor)(TensorDesc*);
  Status (*SetTensor4dDescriptor)(TensorDesc, int format, int dataType, int n, int c, int h, int w);
  Status (*CreateFilterDescriptor)(FilterDesc*);
  Status (*SetFilter4dDescriptor)(FilterDesc, int dataType, int format, int k, int c, int h, int w);
  Status (*CreateConvolutionDescriptor)(ConvDesc*);
  Status (*SetConvolution2dDescriptor)(ConvDesc, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w, int mode,
                                       int computeType);
  Status (*SetConvolutionGroupCount)(ConvDesc, int);
  Status (*SetConvolutionMathType)(ConvDesc, int);
  Status (*GetConvolutionForwardAlgorithm_v7)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, int*,
                                              AlgoPerf*);
  Status (*FindConvolutionForwardAlgorithmEx)(Handle, TensorDesc, const void*, FilterDesc, const void*, ConvDesc,
                                              TensorDesc, void*, int, int*, AlgoPerf*, void*, size_t);
  Status (*GetConvolutionForwardWorkspaceSize)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, size_t*);
  Status (*ConvolutionForward)(Handle, const void* alpha, TensorDesc, const void* x, FilterDesc, const void* w,
                               ConvDesc, int algo, void* ws, size_t ws_bytes, const void* beta, TensorDesc, void* y);
  Status (*GetConvolutionBackwardDataAlgorithm_v7)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, int*,
                                                   AlgoPerf*);
  Status (*FindConvolutionBackwardDataAlgorithmEx)(Handle, FilterDesc, const void*, TensorDesc, const void*,
                                                   ConvDesc, TensorDesc, void*, int, int*, AlgoPerf*, void*, size_t);
  Status (*GetConvolutionBackwardDataWorkspaceSize)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int,
                                                    size_t*);
  Status (*ConvolutionBackwardData)(Handle, const void* alpha, FilterDesc, const void* w, TensorDesc, const void* dy,
                                    ConvDesc, int algo, void* ws, size_t ws_bytes, const void* beta, TensorDesc,
                                    void* dx);
  bool ok = false;
  std::string why;
  size_t version = 0;
  Handle handle[64] = {};
};

Cudnn& lib() {
  static Cudnn* c = [] {
    auto* c = new Cudnn{};
    std::vector<std::string> cands;
    if (const char* e = std::getenv("TC_CUDNN_PATH"); e && *e) {
      std::string p = e;
      cands.push_back(p);
      cands.push_back(p + "/libcudnn.so.9");
      cands.push_back(p + "/lib64/libcudnn.so.9");
      cands.push_back(p + "/lib/libcudnn.so.9");
    }
    for (const char* env : {"TC_CUDA_PATH", "CUDA_PATH", "CUDA_HOME"})
      if (const char* e = std::getenv(env)) cands.push_back(std::string(e) + "/lib64/libcudnn.so.9");
    cands.push_back("/usr/local/cuda/lib64/libcudnn.so.9");
    cands.push_back("libcudnn.so.9");  // the loader path (the system library folder, LD_LIBRARY_PATH)
    cands.push_back("/usr/lib/x86_64-linux-gnu/libcudnn.so.9");
    void* h = nullptr;
    std::string errs;
    for (auto& n : cands) {
      h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      if (errs.empty() && e) errs = e;
    }
    if (!h) {
      c->why = "cannot load cuDNN (libcudnn.so.9): " + errs;
      return c;
    }
    std::string missing;
    auto get = [&](const char* name, auto& fp) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      if (!fp) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    get("cudnnGetVersion", c->GetVersion);
    get("cudnnGetErrorString", c->GetErrorString);
    get("cudnnCreate", c->Create);
    get("cudnnSetStream", c->SetStream);
    get("cudnnCreateTensorDescriptor", c->CreateTensorDescriptor);
    get("cudnnSetTensor4dDescriptor", c->SetTensor4dDescriptor);
    get("cudnnCreateFilterDescriptor", c->CreateFilterDescriptor);
    get("cudnnSetFilter4dDescriptor", c->SetFilter4dDescriptor);
    get("cudnnCreateConvolutionDescriptor", c->CreateConvolutionDescriptor);
    get("cudnnSetConvolution2dDescriptor", c->SetConvolution2dDescriptor);
    get("cudnnSetConvolutionGroupCount", c->SetConvolutionGroupCount);
    get("cudnnSetConvolutionMathType", c->SetConvolutionMathType);
    get("cudnnGetConvolutionForwardAlgorithm_v7", c->GetConvolutionForwardAlgorithm_v7);
    get("cudnnFindConvolutionForwardAlgorithmEx", c->FindConvolutionForwardAlgorithmEx);
    get("cudnnGetConvolutionForwardWorkspaceSize", c->GetConvolutionForwardWorkspaceSize);
    get("cudnnConvolutionForward", c->ConvolutionForward);
    get("cudnnGetConvolutionBackwardDataAlgorithm_v7", c->GetConvolutionBackwardDataAlgorithm_v7);
    get("cudnnFindConvolutionBackwardDataAlgorithmEx", c->FindConvolutionBackwardDataAlgorithmEx);
    get("cudnnGetConvolutionBackwardDataWorkspaceSize", c->GetConvolutionBackwardDataWorkspaceSize);
    get("cudnnConvolutionBackwardData", c->ConvolutionBackwardData);
    if (!missing.empty()) {
      c->why = "cuDNN lacks entry points: " + missing;
      return c;
    }
    c->version = c->GetVersion();
    if (c->version < 8000) {
      c->why = "cuDNN " + std::to_string(c->version) + " is too old (8 or newer is needed)";
      return c;
    }
    c->ok = true;
    return c;
  }();
  return *c;
}

bool disabled() {
  const char* e = std::getenv("TC_CUDNN_DISABLE");
  return e && *e && std::strcmp(e, "0") != 0;
}

std::mutex& mu() {
  static std::mutex m;
  return m;
}

Handle handle(int device) {
  Cudnn& c = lib();
  DeviceState& ds = dev(device);
  if (!c.handle[device]) {
    Handle h = nullptr;
    Status st = c.Create(&h);
    if (st != 0) {
      c.ok = false;
      c.why = std::string("cudnnCreate failed: ") + c.GetErrorString(st);
      return nullptr;
    }
    c.SetStream(h, ds.stream);
    c.handle[device] = h;
  }
  return c.handle[device];
}

// One cached problem: descriptors and the chosen algorithm (ok = false: cuDNN rejected it, the
// fallback runs without asking again).
struct Plan {
  bool ok = false;
  TensorDesc in = nullptr, out = nullptr;  // forward: x, y; transposed: dy (= input), dx (= output)
  FilterDesc w = nullptr;
  ConvDesc conv = nullptr;
  int algo = 0;
  size_t ws = 0;
};
using Key = std::tuple<int, int, int, int, std::vector<int64_t>>;  // device, transposed, dtype, tf32, geometry
std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;
  return *m;
}

int cudnn_dtype(DType t) {
  switch (t) {
    case DType::Float64: return kDouble;
    case DType::Float16: return kHalf;
    case DType::BFloat16: return kBFloat16;
    default: return kFloat;
  }
}

constexpr size_t kFindWorkspace = size_t(256) << 20;

Plan make_plan(int device, const ConvProblem& p, const Tensor& x, const Tensor& w, const Tensor& y, bool tf32) {
  Cudnn& c = lib();
  Plan pl;
  Handle h = handle(device);
  if (!h) return pl;
  int dt = cudnn_dtype(p.dt);
  int compute = p.dt == DType::Float64 ? kDouble : kFloat;
  bool ok = c.CreateTensorDescriptor(&pl.in) == 0 && c.CreateTensorDescriptor(&pl.out) == 0 &&
            c.CreateFilterDescriptor(&pl.w) == 0 && c.CreateConvolutionDescriptor(&pl.conv) == 0;
  if (!ok) return pl;
  // Forward: x (N, C, H, W) -> y (N, O, OH, OW), filter (O, C/G, KH, KW).
  // Transposed: the forward convolution maps our output (N, O, OH, OW) to our input (N, C, H, W)
  // with filter (C, O/G, KH, KW) = our weight's layout; we run its backward-data.
  int fk = (int)(p.transposed ? p.C : p.O), fc = (int)(p.transposed ? p.O / p.G : p.C / p.G);
  ok = c.SetTensor4dDescriptor(pl.in, kNCHW, dt, (int)p.N, (int)p.C, (int)p.H, (int)p.W) == 0 &&
       c.SetTensor4dDescriptor(pl.out, kNCHW, dt, (int)p.N, (int)p.O, (int)p.OH, (int)p.OW) == 0 &&
       c.SetFilter4dDescriptor(pl.w, dt, kNCHW, fk, fc, (int)p.KH, (int)p.KW) == 0 &&
       c.SetConvolution2dDescriptor(pl.conv, (int)p.ph, (int)p.pw, (int)p.sh, (int)p.sw, (int)p.dh, (int)p.dw,
                                    kCrossCorrelation, compute) == 0 &&
       c.SetConvolutionGroupCount(pl.conv, (int)p.G) == 0;
  if (!ok) return pl;
  int math = p.dt == DType::Float16 || p.dt == DType::BFloat16 ? kTensorOpMath
             : p.dt == DType::Float32 && tf32                   ? kTensorOpMath
             : p.dt == DType::Float32                           ? kFmaMath
                                                                : kDefaultMath;
  if (c.SetConvolutionMathType(pl.conv, math) != 0) return pl;
  AlgoPerf perf[16] = {};
  int n = 0;
  bool bench = true;
  if (const char* e = std::getenv("TC_CUDNN_BENCHMARK"); e && std::strcmp(e, "0") == 0) bench = false;
  Status st = 1;
  if (bench) {
    void* ws = nullptr;
    size_t wsb = kFindWorkspace;
    try {
      ws = raw_alloc(wsb, device);
    } catch (const Error&) {
      ws = nullptr;
      wsb = 0;
    }
    if (!p.transposed)
      st = c.FindConvolutionForwardAlgorithmEx(h, pl.in, x.data_ptr(), pl.w, w.data_ptr(), pl.conv, pl.out,
                                               y.data_ptr(), 16, &n, perf, ws, wsb);
    else
      st = c.FindConvolutionBackwardDataAlgorithmEx(h, pl.w, w.data_ptr(), pl.in, x.data_ptr(), pl.conv, pl.out,
                                                    y.data_ptr(), 16, &n, perf, ws, wsb);
    raw_free(ws, device);
  }
  if (st != 0) {  // heuristics
    n = 0;
    st = !p.transposed ? c.GetConvolutionForwardAlgorithm_v7(h, pl.in, pl.w, pl.conv, pl.out, 16, &n, perf)
                       : c.GetConvolutionBackwardDataAlgorithm_v7(h, pl.w, pl.in, pl.conv, pl.out, 16, &n, perf);
    if (st != 0) return pl;
  }
  for (int i = 0; i < n; i++) {
    if (perf[i].status != 0) continue;
    // float32 without TF32 permission: only algorithms that keep full float32 math
    if (p.dt == DType::Float32 && !tf32 && perf[i].mathType != kFmaMath && perf[i].mathType != kDefaultMath) continue;
    if (c.SetConvolutionMathType(pl.conv, p.dt == DType::Float32 && !tf32 ? kFmaMath : perf[i].mathType) != 0)
      continue;
    size_t need = 0;
    Status s2 = !p.transposed
                    ? c.GetConvolutionForwardWorkspaceSize(h, pl.in, pl.w, pl.conv, pl.out, perf[i].algo, &need)
                    : c.GetConvolutionBackwardDataWorkspaceSize(h, pl.w, pl.in, pl.conv, pl.out, perf[i].algo, &need);
    if (s2 != 0) continue;
    pl.algo = perf[i].algo;
    pl.ws = need;
    pl.ok = true;
    break;
  }
  return pl;
}

// TC_CUDNN_STATS=1: host time spent per convolution (in tc's code around cuDNN and inside the
// cuDNN call itself) and the algorithms chosen, printed to stderr at exit — to tell CPU overhead
// of the legacy API from slow kernels without a profiler.
struct Stats {
  bool on = [] {
    const char* e = std::getenv("TC_CUDNN_STATS");
    return e && std::strcmp(e, "1") == 0;
  }();
  int64_t calls = 0;
  double total_us = 0, cudnn_us = 0;
  std::map<int, int64_t> algos;
  ~Stats() {
    if (!on || !calls) return;
    std::fprintf(stderr, "cudnn stats: %lld convolutions, host us per call: %.1f in tc_conv, %.1f inside cuDNN; algos:",
                 (long long)calls, total_us / calls, cudnn_us / calls);
    for (auto& [a, n] : algos) std::fprintf(stderr, " %d x%lld", a, (long long)n);
    std::fprintf(stderr, "\n");
  }
};
Stats& stats() {
  static Stats s;
  return s;
}
using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

}  // namespace

bool cudnn_available(std::string* why) {
  Cudnn& c = lib();
  if (!c.ok && why) *why = c.why;
  return c.ok;
}

bool cudnn_conv(const ConvProblem& p, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  if (compile_only() || disabled()) return false;
  if (p.dt != DType::Float32 && p.dt != DType::Float64 && p.dt != DType::Float16 && p.dt != DType::BFloat16)
    return false;
  for (int64_t v : {p.N, p.C, p.H, p.W, p.O, p.KH, p.KW, p.G, p.OH, p.OW})
    if (v <= 0 || v > INT_MAX) return false;
  if (x.numel() > INT_MAX || w.numel() > INT_MAX || y.numel() > INT_MAX) return false;
  Cudnn& c = lib();
  if (!c.ok) return false;
  Clock::time_point t0 = Clock::now();
  int device = y.device().index;
  bool tf32 = p.dt == DType::Float32 && allow_tf32();
  std::lock_guard<std::mutex> lock(mu());
  Key key{device, p.transposed ? 1 : 0, (int)p.dt, tf32 ? 1 : 0,
          {p.N, p.C, p.H, p.W, p.O, p.KH, p.KW, p.G, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.OH, p.OW}};
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(device, p, x, w, y, tf32)).first;
  const Plan& pl = it->second;
  if (!pl.ok) return false;
  Handle h = c.handle[device];
  dev(device);  // the device's context current on this thread
  double beta = 0;
  if (bias.defined()) {  // y = bias (broadcast over N and the image), then the convolution adds onto it
    Shape ysz{p.N, p.O, p.OH * p.OW};
    copy_strided(y.as_strided(ysz, {p.O * p.OH * p.OW, p.OH * p.OW, 1}, y.offset()),
                 bias.as_strided(ysz, {0, bias.strides()[0], 0}, bias.offset()));
    beta = 1;
  }
  double ad = 1, bd = beta;
  float af = 1, bf = (float)beta;
  const void* alpha = p.dt == DType::Float64 ? (const void*)&ad : (const void*)&af;
  const void* betap = p.dt == DType::Float64 ? (const void*)&bd : (const void*)&bf;
  void* ws = pl.ws ? raw_alloc(pl.ws, device) : nullptr;
  Clock::time_point t1 = Clock::now();
  Status st = !p.transposed ? c.ConvolutionForward(h, alpha, pl.in, x.data_ptr(), pl.w, w.data_ptr(), pl.conv, pl.algo,
                                                   ws, pl.ws, betap, pl.out, y.data_ptr())
                            : c.ConvolutionBackwardData(h, alpha, pl.w, w.data_ptr(), pl.in, x.data_ptr(), pl.conv,
                                                        pl.algo, ws, pl.ws, betap, pl.out, y.data_ptr());
  if (stats().on) {
    stats().cudnn_us += us_since(t1);
    stats().calls++;
    stats().algos[pl.algo]++;
  }
  raw_free(ws, device);  // stream-ordered: the next user of the block runs after this convolution
  TC_CHECK(st == 0, DeviceError, "cuDNN %s failed: %s (N=%lld C=%lld H=%lld W=%lld O=%lld kernel %lldx%lld)",
           p.transposed ? "cudnnConvolutionBackwardData" : "cudnnConvolutionForward", c.GetErrorString(st),
           (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.O, (long long)p.KH,
           (long long)p.KW);
  last_conv_impl_slot() = "cudnn";
  if (stats().on) stats().total_us += us_since(t0);
  return true;
}

}  // namespace tc::cuda
