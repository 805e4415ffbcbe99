// Convolutions through cuDNN's backend (graph) API, dlopen'ed on first use: $TC_CUDNN_PATH (the
// library file or its folder), the toolkit's lib64, then the loader path. Nothing here needs
// cuDNN's headers: the few enum values and entry points used are declared below (checked against
// cudnn_graph.h where the build machine has it).
//
// Why not the legacy API (cudnnConvolutionForward): in cuDNN 9 it rebuilds an operation graph
// behind every call, 70-130 us of host time, which made eager ResNet-50 host-bound. Here each
// problem (shape, dtype, padding, stride, dilation, groups, pointer alignment, TF32 setting) gets
// one operation graph with a single convolution node (CONVOLUTION_FORWARD; conv_transpose2d is
// the BACKWARD_DATA of the forward convolution it transposes; _conv2d_weight_backward, conv2d's
// weight gradient, its BACKWARD_FILTER), heuristics mode A give engine
// configurations, the first few that finalize into execution plans (engines that compile at run
// time left out) are timed once in device time (TC_CUDNN_BENCHMARK=0: the heuristics' first) and
// the fastest plan is cached for the process; TC_CUDNN_LAYOUT=any or nhwc adds channels-last
// plans for forward and backward-data convolutions (make_plan says why that is not the default). A channels-last
// problem (ConvProblem::channels_last: the CUDA backend's layout, backends/cuda/cuda_layout.h)
// reads x and writes y channels-last where they are, with the filter as it is or copied
// channels-last per call, whichever is faster.
// A call then only fills a variant pack (the three data pointers and a workspace from tc's
// caching allocator) and runs cudnnBackendExecute. float32 may use TF32 only when tc's float32
// matmul precision allows it (engines with the tensor-core note are skipped otherwise, and
// engines that down-convert inputs always). Bias is added by one elementwise pass afterwards.
// TC_CUDNN_DISABLE=1 (read on every call) makes every convolution take the im2col + cuBLAS path
// of stdlib/cuda/linalg.cpp, so both can be tested in one process.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda/elementwise.h"
#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda.h"

namespace tc::cuda {
namespace {

// ---- cuDNN declarations (C API, cuDNN 9; values of cudnn_graph.h) ----------------------------
using Status = int;  // cudnnStatus_t: 0 = CUDNN_STATUS_SUCCESS
using Handle = struct cudnnContext*;
using Desc = void*;  // cudnnBackendDescriptor_t
enum DataType : int { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 9 };  // cudnnDataType_t
enum DescType : int {                                                         // cudnnBackendDescriptorType_t
  kConvolutionDesc = 1,
  kEngineDesc = 2,
  kEngineCfgDesc = 3,
  kEngineHeurDesc = 4,
  kPlanDesc = 5,
  kConvForwardOp = 10,
  kConvBackwardFilterOp = 11,
  kConvBackwardDataOp = 12,
  kOpGraphDesc = 15,
  kVariantPackDesc = 16,
  kTensorDesc = 17,
};
enum AttrType : int {  // cudnnBackendAttributeType_t
  kTHandle = 0,
  kTDataType = 1,
  kTInt64 = 3,
  kTFloat = 4,
  kTDouble = 5,
  kTVoidPtr = 6,
  kTConvMode = 7,
  kTHeurMode = 8,
  kTNumericalNote = 11,
  kTDescriptor = 15,
  kTBehaviorNote = 19,
};
enum Attr : int {  // cudnnBackendAttributeName_t
  kConvCompType = 100,
  kConvMode = 101,
  kConvDilations = 102,
  kConvFilterStrides = 103,
  kConvPostPaddings = 104,
  kConvPrePaddings = 105,
  kConvSpatialDims = 106,
  kHeurMode = 200,
  kHeurOpGraph = 201,
  kHeurResults = 202,
  kCfgEngine = 300,
  kPlanHandle = 400,
  kPlanEngineCfg = 401,
  kPlanWorkspaceSize = 402,
  kFwdAlpha = 700,
  kFwdBeta = 701,
  kFwdConvDesc = 702,
  kFwdW = 703,
  kFwdX = 704,
  kFwdY = 705,
  kBwdDataAlpha = 706,
  kBwdDataBeta = 707,
  kBwdDataConvDesc = 708,
  kBwdDataW = 709,
  kBwdDataDx = 710,
  kBwdDataDy = 711,
  kBwdFilterAlpha = 712,
  kBwdFilterBeta = 713,
  kBwdFilterConvDesc = 714,
  kBwdFilterDw = 715,
  kBwdFilterX = 716,
  kBwdFilterDy = 717,
  kGraphHandle = 800,
  kGraphOps = 801,
  kTensorAlignment = 900,
  kTensorDataType = 901,
  kTensorDims = 902,
  kTensorStrides = 903,
  kTensorUid = 906,
  kPackUids = 1000,
  kPackPointers = 1001,
  kPackWorkspace = 1003,
  kEngineGlobalIndex = 1301,
  kEngineNumericalNote = 1303,
  kEngineBehaviorNote = 1305,
};
enum : int { kCrossCorrelation = 1 };                  // cudnnConvolutionMode_t
enum : int { kHeurModeA = 3, kHeurModeFallback = 2 };  // cudnnBackendHeurMode_t
enum : int { kNoteTensorCore = 0, kNoteDownConvertInputs = 1 };  // cudnnBackendNumericalNote_t
enum : int { kNoteRuntimeCompilation = 0 };                      // cudnnBackendBehaviorNote_t
// Tensor unique ids in the variant pack: our input, weight and output.
enum : int64_t { kUidX = 1, kUidW = 2, kUidY = 3 };

struct Cudnn {
  size_t (*GetVersion)();
  const char* (*GetErrorString)(Status);
  Status (*Create)(Handle*);
  Status (*SetStream)(Handle, CUstream);
  Status (*CreateDescriptor)(int type, Desc*);
  Status (*DestroyDescriptor)(Desc);
  Status (*SetAttribute)(Desc, int name, int type, int64_t count, const void* values);
  Status (*GetAttribute)(Desc, int name, int type, int64_t requested, int64_t* count, void* values);
  Status (*Finalize)(Desc);
  Status (*Execute)(Handle, Desc plan, Desc variant_pack);
  bool ok = false;
  std::string why;
  size_t version = 0;
  Handle handle[64] = {};
  CUstream stream[64] = {};  // the stream each handle is set to
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
    get("cudnnBackendCreateDescriptor", c->CreateDescriptor);
    get("cudnnBackendDestroyDescriptor", c->DestroyDescriptor);
    get("cudnnBackendSetAttribute", c->SetAttribute);
    get("cudnnBackendGetAttribute", c->GetAttribute);
    get("cudnnBackendFinalize", c->Finalize);
    get("cudnnBackendExecute", c->Execute);
    if (!missing.empty()) {
      c->why = "cuDNN lacks entry points: " + missing;
      return c;
    }
    c->version = c->GetVersion();
    if (c->version < 90000) {
      c->why = "cuDNN " + std::to_string(c->version) + " is too old (9 or newer is needed)";
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

// The device's handle, set to the calling thread's current stream (null if cudnnCreate failed).
Handle handle(int device) {
  Cudnn& c = lib();
  CUstream s = current(device);
  if (!c.handle[device]) {
    Handle h = nullptr;
    Status st = c.Create(&h);
    if (st != 0) {
      c.ok = false;
      c.why = std::string("cudnnCreate failed: ") + c.GetErrorString(st);
      return nullptr;
    }
    c.handle[device] = h;
  }
  if (c.stream[device] != s) {
    c.SetStream(c.handle[device], s);
    c.stream[device] = s;
  }
  return c.handle[device];
}

// A backend descriptor owned by this scope (release() keeps it alive past it).
struct Owned {
  Desc d = nullptr;
  explicit Owned(int type) {
    if (lib().CreateDescriptor(type, &d) != 0) d = nullptr;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (d) lib().DestroyDescriptor(d);
  }
  Desc release() {
    Desc r = d;
    d = nullptr;
    return r;
  }
};

// Sets attributes one after another; the first failure sticks (the descriptor is then unusable).
struct Setter {
  bool ok = true;
  void operator()(Desc d, int name, int type, int64_t count, const void* values) {
    if (ok) ok = d && lib().SetAttribute(d, name, type, count, values) == 0;
  }
  bool finalize(Desc d) { return ok = ok && lib().Finalize(d) == 0; }
};

// Graphs and plans name the handle they are built for; cuDNN 9 marks these attributes deprecated
// (a device-properties descriptor may replace them), so a refusal is not an error.
void set_handle(Desc d, int name, Handle h) {
  if (d) lib().SetAttribute(d, name, kTHandle, 1, &h);
}

int cudnn_dtype(DType t) {
  switch (t) {
    case DType::Float64: return kDouble;
    case DType::Float16: return kHalf;
    case DType::BFloat16: return kBFloat16;
    default: return kFloat;
  }
}

// A tensor descriptor of dims (N, C, H, W) laid out as NCHW, or NHWC (channels last).
Desc tensor_desc(Setter& set, Owned& t, int64_t uid, int dtype, int64_t align, std::array<int64_t, 4> dims, bool nhwc) {
  std::array<int64_t, 4> strides{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  if (nhwc) strides = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  set(t.d, kTensorDataType, kTDataType, 1, &dtype);
  set(t.d, kTensorDims, kTInt64, 4, dims.data());
  set(t.d, kTensorStrides, kTInt64, 4, strides.data());
  set(t.d, kTensorUid, kTInt64, 1, &uid);
  set(t.d, kTensorAlignment, kTInt64, 1, &align);
  set.finalize(t.d);
  return t.d;
}

// One cached problem: the execution plan (null: cuDNN has no engine for it, the fallback runs
// without asking again), its workspace and cuDNN's global index of the engine that runs it.
// nhwc: the plan convolves channels-last x into channels-last y; for an NCHW problem the call
// copies x into that layout and y back (forward convolutions only; chosen only where that is
// faster in all), a channels-last problem (ConvProblem::channels_last) is given them so.
// w_nhwc: the plan's filter is channels-last (O, KH, KW, C/G), a copy the call makes of w unless
// KH = KW = 1 (the same bytes); else it reads w as it is (O, C/G, KH, KW).
struct Plan {
  Desc plan = nullptr;
  int64_t ws = 0, engine = -1;
  bool nhwc = false, w_nhwc = false;
  int rank = 0;  // heuristics mode * 1000 + its place among that mode's candidates (TC_CUDNN_STATS=2)
  // Variant packs of recent calls by their pointers (x, w, y, workspace): in steady state the
  // caching allocator often hands a call the blocks it had the iteration before, and then the
  // call skips creating and finalizing a pack.
  struct Pack {
    void* ptrs[4] = {};
    Desc d = nullptr;
  };
  std::array<Pack, 8> packs;
  unsigned next = 0;
};
void destroy(Plan& pl) {
  for (auto& p : pl.packs)
    if (p.d) lib().DestroyDescriptor(p.d);
  if (pl.plan) lib().DestroyDescriptor(pl.plan);
  pl = Plan{};
}
using Key = std::array<int64_t, 24>;
std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;
  return *m;
}

// The operation graph of problem p: x -> y (forward), dy = x -> dx = y (transposed), or x and
// dy = y -> dw = w (weight gradient).
Desc op_graph(const ConvProblem& p, Handle h, int64_t align, bool nhwc, bool w_nhwc,
              Owned keep[5]) {
  Setter set;
  int dt = cudnn_dtype(p.dt);
  int compute = p.dt == DType::Float64 ? kDouble : kFloat;
  // Forward: x (N, C, H, W) -> y (N, O, OH, OW), filter (O, C/G, KH, KW). Transposed: the forward
  // convolution maps our output (N, O, OH, OW) to our input (N, C, H, W) with filter
  // (C, O/G, KH, KW), our weight's layout; we run its backward-data. Groups follow from the
  // channel counts of x and the filter.
  Desc x = tensor_desc(set, keep[0], kUidX, dt, align, {p.N, p.C, p.H, p.W}, nhwc);
  Desc w = tensor_desc(set, keep[1], kUidW, dt, align,
                       {p.transposed ? p.C : p.O, p.transposed ? p.O / p.G : p.C / p.G, p.KH, p.KW},
                       w_nhwc);
  Desc y = tensor_desc(set, keep[2], kUidY, dt, align, {p.N, p.O, p.OH, p.OW}, nhwc);
  Desc conv = keep[3].d;
  int64_t dims = 2;
  int mode = kCrossCorrelation;
  int64_t pad[2] = {p.ph, p.pw}, stride[2] = {p.sh, p.sw}, dil[2] = {p.dh, p.dw};
  set(conv, kConvSpatialDims, kTInt64, 1, &dims);
  set(conv, kConvCompType, kTDataType, 1, &compute);
  set(conv, kConvMode, kTConvMode, 1, &mode);
  set(conv, kConvPrePaddings, kTInt64, 2, pad);
  set(conv, kConvPostPaddings, kTInt64, 2, pad);
  set(conv, kConvFilterStrides, kTInt64, 2, stride);
  set(conv, kConvDilations, kTInt64, 2, dil);
  set.finalize(conv);
  Owned op(p.wgrad ? kConvBackwardFilterOp : p.transposed ? kConvBackwardDataOp : kConvForwardOp);
  double alpha_d = 1, beta_d = 0;
  float alpha_f = 1, beta_f = 0;
  int st = p.dt == DType::Float64 ? kTDouble : kTFloat;
  const void* alpha = p.dt == DType::Float64 ? (const void*)&alpha_d : (const void*)&alpha_f;
  const void* beta = p.dt == DType::Float64 ? (const void*)&beta_d : (const void*)&beta_f;
  // the op's attributes for x, w, y, the convolution, alpha and beta: forward, backward-data
  // (x is dy, y is dx), backward-filter (w is dw, y is dy)
  static const int kAttrs[3][6] = {
      {kFwdX, kFwdW, kFwdY, kFwdConvDesc, kFwdAlpha, kFwdBeta},
      {kBwdDataDy, kBwdDataW, kBwdDataDx, kBwdDataConvDesc, kBwdDataAlpha, kBwdDataBeta},
      {kBwdFilterX, kBwdFilterDw, kBwdFilterDy, kBwdFilterConvDesc, kBwdFilterAlpha, kBwdFilterBeta}};
  const int* at = kAttrs[p.wgrad ? 2 : p.transposed ? 1 : 0];
  const Desc ds[4] = {x, w, y, conv};
  for (int i = 0; i < 4; i++) set(op.d, at[i], kTDescriptor, 1, &ds[i]);
  set(op.d, at[4], st, 1, alpha);
  set(op.d, at[5], st, 1, beta);
  set.finalize(op.d);
  Desc opd = op.d;
  Desc graph = keep[4].d;
  set(graph, kGraphOps, kTDescriptor, 1, &opd);
  set_handle(graph, kGraphHandle, h);
  set.finalize(graph);
  return set.ok ? graph : nullptr;
}

// The engine configurations heuristics `mode` proposes for the graph, best first (owned by the
// caller).
std::vector<Desc> engine_configs(Desc graph, int mode) {
  Cudnn& c = lib();
  Owned heur(kEngineHeurDesc);
  Setter set;
  set(heur.d, kHeurOpGraph, kTDescriptor, 1, &graph);
  set(heur.d, kHeurMode, kTHeurMode, 1, &mode);
  if (!set.finalize(heur.d)) return {};
  int64_t n = 0;
  if (c.GetAttribute(heur.d, kHeurResults, kTDescriptor, 0, &n, nullptr) != 0 || n <= 0) return {};
  std::vector<Desc> cfgs(n, nullptr);
  for (auto& d : cfgs)
    if (c.CreateDescriptor(kEngineCfgDesc, &d) != 0) d = nullptr;
  int64_t got = 0;
  Status st = c.GetAttribute(heur.d, kHeurResults, kTDescriptor, n, &got, cfgs.data());
  for (int64_t i = st == 0 ? got : 0; i < n; i++)
    if (cfgs[i]) c.DestroyDescriptor(cfgs[i]);
  cfgs.resize(st == 0 ? got : 0);
  return cfgs;
}

// Whether an engine configuration is a candidate, and its engine's index: it computes at the
// precision tc promises, and it needs no runtime compilation (finalizing such a plan runs NVRTC
// for 0.3-3 s: one problem would cost more than compiling a whole graph).
bool candidate(Desc cfg, DType dt, bool tf32, int64_t* engine_index, bool* runtime_compiled) {
  Cudnn& c = lib();
  Owned engine(kEngineDesc);
  int64_t n = 0;
  if (c.GetAttribute(cfg, kCfgEngine, kTDescriptor, 1, &n, &engine.d) != 0) return false;
  c.GetAttribute(engine.d, kEngineGlobalIndex, kTInt64, 1, &n, engine_index);
  int notes[32] = {};
  if (c.GetAttribute(engine.d, kEngineNumericalNote, kTNumericalNote, 32, &n, notes) != 0) return false;
  for (int64_t i = 0; i < n; i++) {
    if (notes[i] == kNoteDownConvertInputs) return false;
    if (notes[i] == kNoteTensorCore && dt == DType::Float32 && !tf32) return false;
  }
  if (c.GetAttribute(engine.d, kEngineBehaviorNote, kTBehaviorNote, 32, &n, notes) == 0)
    for (int64_t i = 0; i < n; i++)
      if (notes[i] == kNoteRuntimeCompilation) return !(*runtime_compiled = true);
  return true;
}

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// TC_CUDNN_STATS=1: host time spent per convolution (in tc's code around cuDNN, finding or
// building the variant pack, and inside cudnnBackendExecute) and the engines chosen, printed to
// stderr at exit — to tell host overhead from slow kernels without a profiler. TC_CUDNN_STATS=2
// also times every candidate of both heuristics modes (not only the first kTimedCandidates of
// mode A) and prints each problem's line when its plan is built: the candidates' engines and
// device times, the pick, and the engines left out for runtime compilation.
struct Stats {
  int level = [] {
    const char* e = std::getenv("TC_CUDNN_STATS");
    return e && *e ? std::atoi(e) : 0;
  }();
  bool on = level >= 1;
  int64_t calls = 0, pack_hits = 0, nhwc_calls = 0;
  double total_us = 0, pack_us = 0, cudnn_us = 0, plan_ms = 0;
  std::map<int64_t, int64_t> engines;
  ~Stats() {
    if (!on || !calls) return;
    std::fprintf(stderr, "cudnn stats (cuDNN %zu): %lld convolutions (%lld channels-last), %zu plans (%.1f ms building and timing them), host us per call: %.1f in cudnn_conv, %.1f "
                 "finding or building the variant pack (%lld found), %.1f in cudnnBackendExecute; engines:",
                 lib().version, (long long)calls, (long long)nhwc_calls, plans().size(), plan_ms, total_us / calls, pack_us / calls, (long long)pack_hits,
                 cudnn_us / calls);
    for (auto& [e, n] : engines) std::fprintf(stderr, " %lld x%lld", (long long)e, (long long)n);
    std::fprintf(stderr, "\n");
  }
};
Stats& stats() {
  static Stats s;
  return s;
}

// The variant pack of one call of pl (null if cuDNN refuses the pointers).
Desc variant_pack(Plan& pl, void* const ptrs[4], bool counted) {
  for (auto& p : pl.packs)
    if (p.d && std::equal(ptrs, ptrs + 4, p.ptrs)) {
      stats().pack_hits += counted;
      return p.d;
    }
  static const int64_t uids[3] = {kUidX, kUidW, kUidY};
  Owned pack(kVariantPackDesc);
  Setter set;
  set(pack.d, kPackUids, kTInt64, 3, uids);
  set(pack.d, kPackPointers, kTVoidPtr, 3, ptrs);
  set(pack.d, kPackWorkspace, kTVoidPtr, 1, &ptrs[3]);
  if (!set.finalize(pack.d)) return nullptr;
  Plan::Pack& slot = pl.packs[pl.next++ % pl.packs.size()];
  if (slot.d) lib().DestroyDescriptor(slot.d);
  std::copy(ptrs, ptrs + 4, slot.ptrs);
  slot.d = pack.release();
  return slot.d;
}

// The operands of one call: x, w, y of problem p, contiguous (NCHW), or x and y channels-last
// (p.channels_last).
struct Operands {
  const ConvProblem& p;
  const Tensor &x, &w, &y;
  void* ptrs[3];
};

// out = in, elementwise over out's shape (any strides on either side): the layout copies of the
// channels-last plans.
void copy_layout(const Tensor& out, const Tensor& in) {
  EwSpec s{"conv_layout", {{EwIn::Ptr, in.dtype(), mtype(in.dtype())}}, in.dtype(), {}, "a0"};
  run_elementwise(s, out, {in}, {});
}

// A channels-last buffer of dims (N, C, H, W), viewed as a tensor of those dims.
Tensor channels_last(int64_t N, int64_t C, int64_t H, int64_t W, const Tensor& like) {
  Tensor t = Tensor::empty({N, H, W, C}, like.dtype(), like.device());
  return t.as_strided({N, C, H, W}, {H * W * C, 1, W * C, C}, t.offset());
}

// Runs pl on the operands with a workspace from the caching allocator; cuDNN's status. A
// channels-last plan copies x and w into channels-last buffers first and its result into y after.
// `counted`: a call of the program (not of plan selection), for TC_CUDNN_STATS.
Status execute(Handle h, Plan& pl, const Operands& o, int device, bool counted = true) {
  Clock::time_point t0 = Clock::now();
  Tensor xl, wl, yl;  // the channels-last copies (freed stream-ordered, after this call's work)
  void* const* ptrs = o.ptrs;
  void* cl_ptrs[3];
  const ConvProblem& p = o.p;
  const bool copy_xy = pl.nhwc && !p.channels_last, copy_w = pl.w_nhwc && p.KH * p.KW > 1;
  if (copy_xy || copy_w) {
    std::copy(o.ptrs, o.ptrs + 3, cl_ptrs);
    ptrs = cl_ptrs;
  }
  if (copy_xy) {
    xl = channels_last(p.N, p.C, p.H, p.W, o.x);
    yl = channels_last(p.N, p.O, p.OH, p.OW, o.y);
    copy_layout(xl, o.x);
    cl_ptrs[0] = xl.data_ptr(), cl_ptrs[2] = yl.data_ptr();
  }
  if (copy_w) {
    wl = p.transposed ? channels_last(p.C, p.O / p.G, p.KH, p.KW, o.w) : channels_last(p.O, p.C / p.G, p.KH, p.KW, o.w);
    copy_layout(wl, o.w);
    cl_ptrs[1] = wl.data_ptr();
  }
  void* all[4] = {ptrs[0], ptrs[1], ptrs[2], pl.ws ? raw_alloc((size_t)pl.ws, device) : nullptr};
  Desc pack = variant_pack(pl, all, counted);
  Clock::time_point t1 = Clock::now();
  Status st = pack ? lib().Execute(h, pl.plan, pack) : 3000;  // CUDNN_STATUS_NOT_SUPPORTED
  raw_free(all[3], device);  // stream-ordered: the next user of the block runs after this convolution
  if (copy_xy && st == 0) copy_layout(o.y, yl);
  if (stats().on && counted) {
    stats().pack_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    stats().cudnn_us += us_since(t1);
  }
  return st;
}

bool benchmark() {
  const char* e = std::getenv("TC_CUDNN_BENCHMARK");
  return !(e && std::strcmp(e, "0") == 0);
}
constexpr int kTimedCandidates = 8;  // per layout
constexpr int64_t kMaxWorkspace = int64_t(1) << 30;

// The device time (us) of `runs` executions of each plan on the real operands (1e300: the plan
// failed or ran out of memory for its workspace). Device time, not the host's: a call of
// cudnnBackendExecute costs ~20 us of host time, more than many of these convolutions take on
// the device, and a replayed CUDA graph pays only the device part. So the device first spins
// for longer than the host takes to enqueue every candidate's runs (measured on a warm-up pass,
// which also loads each engine's kernels), and events around each candidate's runs then time
// them back to back. Two warm-up passes: the first loads the engines' kernels, the second
// measures the host's pace.
std::vector<double> device_us(Handle h, std::vector<Plan>& found, const Operands& o, int device, int runs) {
  std::vector<double> us(found.size(), 1e300);
  std::vector<char> ok(found.size(), 1);
  // one execution of plan i; a failure (out of memory for its workspace too) drops the candidate
  auto run = [&](size_t i) {
    try {
      ok[i] = ok[i] && execute(h, found[i], o, device, false) == 0;
    } catch (const Error&) {
      ok[i] = 0;
    }
  };
  double enqueue_us = 0;
  for (int pass = 0; pass < 2; pass++) {
    Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < found.size(); i++) run(i);
    enqueue_us = us_since(t0) * runs;
    sync_stream(device);
  }
  std::vector<CUevent> ev(2 * found.size(), nullptr);
  for (CUevent& e : ev) check(drv().EventCreate(&e, CU_EVENT_DEFAULT), "cudnn timing event");
  spin(device, std::min(50e3, 1.5 * enqueue_us + 100));
  CUstream s = current(device);
  for (size_t i = 0; i < found.size(); i++) {
    if (!ok[i]) continue;
    drv().EventRecord(ev[2 * i], s);
    for (int r = 0; r < runs && ok[i]; r++) run(i);
    drv().EventRecord(ev[2 * i + 1], s);
  }
  sync_stream(device);
  for (size_t i = 0; i < found.size(); i++) {
    float ms = 0;
    if (ok[i] && drv().EventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]) == CUDA_SUCCESS) us[i] = 1e3 * ms / runs;
  }
  for (CUevent e : ev) drv().EventDestroy(e);
  return us;
}

// Which layouts forward and backward-data convolutions' plans may take (TC_CUDNN_LAYOUT, read when a plan is built;
// part of the plan's key): 1 NCHW only (unset or "nchw": the default), 2 channels-last only
// ("nhwc"), 0 both, timed against each other ("any"). Channels-last is not the default: on an
// H100 it never won for ResNet-50 or DenseNet-121 (batch 16, 128x128) once its copies were
// counted, and timing it doubled the time spent building plans (0.6 -> 1.2 s for ResNet-50).
int forced_layout() {
  const char* e = std::getenv("TC_CUDNN_LAYOUT");
  if (e && std::strcmp(e, "any") == 0) return 0;
  if (e && std::strcmp(e, "nhwc") == 0) return 2;
  return 1;
}

// The finalized plans of up to `want` engine configurations of graph: heuristics mode A, then
// the fallback list if none of those qualifies.
// TC_CUDNN_STATS=2 takes the configurations of both modes (up to 40); *rtc gets the place and
// engine of those left out because they compile at run time.
void add_candidates(Desc graph, Handle h, const ConvProblem& p, bool tf32, bool nhwc, bool w_nhwc,
                    int want, std::vector<Plan>* found, std::string* rtc) {
  Cudnn& c = lib();
  int added = 0;
  for (int mode : {kHeurModeA, kHeurModeFallback}) {
    std::vector<Desc> cfgs = engine_configs(graph, mode);
    const size_t before = found->size();
    for (size_t k = 0; k < cfgs.size(); k++) {
      Desc cfg = cfgs[k];
      Plan pl;
      pl.nhwc = nhwc;
      pl.w_nhwc = w_nhwc;
      pl.rank = mode * 1000 + (int)(found->size() - before);
      bool runtime_compiled = false;
      bool ok = added < want && candidate(cfg, p.dt, tf32, &pl.engine, &runtime_compiled);
      if (runtime_compiled) {  // (appended piece by piece: GCC 12 warns falsely, -Wrestrict, on " " + std::string)
        *rtc += ' ';
        *rtc += std::to_string(mode * 1000 + k);
        *rtc += ":e";
        *rtc += std::to_string(pl.engine);
      }
      if (ok) {
        Owned plan(kPlanDesc);
        Setter set;
        set_handle(plan.d, kPlanHandle, h);
        set(plan.d, kPlanEngineCfg, kTDescriptor, 1, &cfg);
        int64_t n = 0;
        if (set.finalize(plan.d) && c.GetAttribute(plan.d, kPlanWorkspaceSize, kTInt64, 1, &n, &pl.ws) == 0 &&
            pl.ws <= kMaxWorkspace) {
          pl.plan = plan.release();
          found->push_back(pl);
          added++;
        }
      }
      c.DestroyDescriptor(cfg);  // a finalized plan keeps what it needs of its configuration
    }
    if (added && stats().level < 2) break;
  }
}

// Builds the plan of one problem. Candidates: the engine configurations of the NCHW graph (our
// layout) and, for forward and backward-data convolutions where forced_layout() allows, of the
// channels-last graph, whose call adds copies of x and w into channels-last buffers and of its
// result back.
// cuDNN's faster engines often exist only for channels-last tensors (H100, batch 16: DenseNet-121's
// 3x3 convolutions of 128 -> 32 channels on 4x4 to 32x32 maps take 16-29 us with the best NCHW
// engine against 8-19 us channels-last, ResNet-50's 3x3 on 8x8 and 4x4 maps 24 and 35 us against
// 13 and 18), but the three copies (elementwise kernels with strided stores) ate the gain: a
// layout that stays channels-last between convolutions is what would pay. With benchmarking the
// first kTimedCandidates of each layout that finalize are timed, device time, copies included,
// on the real operands (y is overwritten, which the caller does anyway), and the fastest kept,
// unless the heuristics' first NCHW candidate is within 5% of it: timing noise must not trade it
// for an equal one (timing all ~35 candidates picked worse engines for ResNet-50 by noise, 1.14
// ms per call against 1.11). Without benchmarking, and while a CUDA graph records, the
// heuristics' first NCHW candidate is taken untimed.
Plan make_plan(int device, const ConvProblem& p, int64_t align, bool tf32, int layout, const Operands& o) {
  Plan best;
  Handle h = handle(device);
  if (!h) return best;
  const bool timed = benchmark() && !capturing();
  // channels-last plans with layout copies: forward and backward-data problems (their x and y are
  // the operand and the result, whichever way; a weight gradient's result is its filter)
  const bool relayout = !p.wgrad && p.dt != DType::Float64;
  std::vector<Plan> found;
  // (x/y channels-last, filter channels-last) in order of preference: a channels-last problem's
  // filter either way (cuDNN's fast engines may want it channels-last; the call then copies it),
  // half the candidates each
  using Layouts = std::pair<bool, bool>;
  const std::vector<Layouts> tries = p.channels_last
                                         ? std::vector<Layouts>{{true, true}, {true, false}}
                                         : std::vector<Layouts>{{false, false}, {true, true}};
  std::string rtc;
  for (auto [nhwc, w_nhwc] : tries) {
    if (!p.channels_last &&
        (nhwc ? !relayout || layout == 1 || (!timed && layout != 2) : layout == 2 && relayout))
      continue;
    Owned keep[5] = {Owned(kTensorDesc), Owned(kTensorDesc), Owned(kTensorDesc), Owned(kConvolutionDesc),
                     Owned(kOpGraphDesc)};
    Desc graph = op_graph(p, h, align, nhwc, w_nhwc, keep);
    const int want = !timed                 ? 1
                     : stats().level >= 2   ? 40
                     : p.channels_last      ? kTimedCandidates / 2
                                            : kTimedCandidates;
    if (graph) add_candidates(graph, h, p, tf32, nhwc, w_nhwc, want, &found, &rtc);
    if (!timed && !found.empty()) break;
  }
  if (found.empty()) return best;
  if (found.size() == 1) return found[0];
  std::vector<double> us = device_us(h, found, o, device, 5);
  // (the heuristics' first is kept within 5 % when it is in the problem's own layout)
  const bool first_eligible = !found[0].nhwc || p.channels_last;
  const size_t pick = fastest_keeping_first(us, found.size(), 1.05, first_eligible);
  if (stats().level >= 2) {
    // the pick among the candidates the default (level 0/1) times, and the best of all
    size_t timed_by_default = 1;
    while (timed_by_default < found.size() && found[timed_by_default].rank < kHeurModeA * 1000 + kTimedCandidates)
      timed_by_default++;
    const size_t pick8 = fastest_keeping_first(us, timed_by_default, 1.05, first_eligible);
    std::fprintf(stderr, "cudnn plan %s N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld p%lld g%lld: default e%lld %.1f us, best e%lld %.1f us (rank %d); first-8 us:",
                 p.wgrad ? "wgrad" : p.transposed ? "dgrad" : "fwd", (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W,
                 (long long)p.O, (long long)p.KH, (long long)p.KW, (long long)p.sh, (long long)p.ph, (long long)p.G,
                 (long long)found[pick8].engine, us[pick8], (long long)found[pick].engine, us[pick], found[pick].rank);
    for (size_t i = 0; i < found.size() && i < 8; i++) std::fprintf(stderr, " e%lld:%.1f", (long long)found[i].engine, us[i]);
    std::fprintf(stderr, "; %zu timed; runtime-compiled left out:%s\n", found.size(), rtc.c_str());
  }
  for (size_t i = 0; i < found.size(); i++) {
    if (i == pick)
      best = found[i];
    else
      destroy(found[i]);
  }
  return best;
}

// The largest power of two (at most 16) dividing every pointer: the alignment cuDNN may assume.
int64_t alignment(void* const ptrs[3]) {
  uintptr_t bits = 16;
  for (int i = 0; i < 3; i++) bits |= (uintptr_t)ptrs[i];
  return (int64_t)(bits & -bits);
}

// y (N, O, L) += bias (O), broadcast over samples and the image (y NCHW or channels-last).
void add_bias(const ConvProblem& p, const Tensor& y, const Tensor& bias) {
  int64_t L = p.OH * p.OW;
  Shape sz{p.N, p.O, L};
  Tensor y3 =
      y.as_strided(sz, p.channels_last ? Shape{p.O * L, 1, p.O} : Shape{p.O * L, L, 1}, y.offset());
  Tensor b3 = bias.as_strided(sz, {0, bias.strides()[0], 0}, bias.offset());
  EwSpec s{"conv_bias", {{EwIn::Ptr, p.dt, mtype(p.dt)}, {EwIn::Ptr, p.dt, mtype(p.dt)}}, p.dt, {}, "a0 + a1"};
  run_elementwise(s, y3, {y3, b3}, {});
}

}  // namespace

bool cudnn_available(std::string* why) {
  Cudnn& c = lib();
  if (!c.ok && why) *why = c.why;
  return c.ok;
}

int64_t cudnn_plan_count() {
  std::lock_guard<std::mutex> lock(mu());
  int64_t n = 0;
  for (auto& [k, pl] : plans()) n += pl.plan != nullptr;
  return n;
}

bool cudnn_conv(const ConvProblem& p, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  if (compile_only() || disabled()) return false;
  if (p.dt != DType::Float32 && p.dt != DType::Float64 && p.dt != DType::Float16 && p.dt != DType::BFloat16)
    return false;
  Cudnn& c = lib();
  if (!c.ok) return false;
  Clock::time_point t0 = Clock::now();
  int device = y.device().index;
  bool tf32 = p.dt == DType::Float32 && allow_tf32();
  void* const ptrs[3] = {x.data_ptr(), w.data_ptr(), y.data_ptr()};
  int64_t align = alignment(ptrs);
  std::lock_guard<std::mutex> lock(mu());
  const int layout = forced_layout();
  Key key{device, p.transposed, (int64_t)p.dt, tf32, align, p.N,     p.C,    p.H,
          p.W,    p.O,          p.KH,          p.KW, p.G,   p.sh,    p.sw,   p.ph,
          p.pw,   p.dh,         p.dw,          p.OH, p.OW,  p.wgrad, layout, p.channels_last};
  const Operands o{p, x, w, y, {ptrs[0], ptrs[1], ptrs[2]}};
  auto it = plans().find(key);
  if (it == plans().end()) {
    Clock::time_point tp = Clock::now();
    it = plans().emplace(key, make_plan(device, p, align, tf32, layout, o)).first;
    stats().plan_ms += us_since(tp) / 1e3;
  }
  Plan& pl = it->second;
  if (!pl.plan) return false;
  Status st = execute(handle(device), pl, o, device);  // on the current stream
  if (stats().on) {
    stats().calls++;
    stats().nhwc_calls += pl.nhwc;
    stats().engines[pl.engine]++;
  }
  TC_CHECK(st == 0, DeviceError, "cuDNN convolution%s failed: %s (N=%lld C=%lld H=%lld W=%lld O=%lld kernel %lldx%lld)",
           p.wgrad ? " (weight gradient)" : p.transposed ? " (transposed)" : "", c.GetErrorString(st), (long long)p.N, (long long)p.C,
           (long long)p.H, (long long)p.W, (long long)p.O, (long long)p.KH, (long long)p.KW);
  if (bias.defined()) add_bias(p, y, bias);
  last_conv_impl_slot() = "cudnn";
  if (stats().on) stats().total_us += us_since(t0);
  return true;
}

}  // namespace tc::cuda

// The enum values above are cuDNN's ABI; where the build machine has cuDNN's header, check them.
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
namespace tc::cuda {
constexpr bool same(int ours, int theirs) { return ours == theirs; }
static_assert(same(kHalf, CUDNN_DATA_HALF) && same(kBFloat16, CUDNN_DATA_BFLOAT16) && same(kDouble, CUDNN_DATA_DOUBLE));
static_assert(same(kConvForwardOp, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) &&
              same(kConvBackwardFilterOp, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) &&
              same(kConvBackwardDataOp, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR) &&
              same(kOpGraphDesc, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) &&
              same(kVariantPackDesc, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) && same(kTensorDesc, CUDNN_BACKEND_TENSOR_DESCRIPTOR) &&
              same(kPlanDesc, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) &&
              same(kEngineHeurDesc, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) && same(kEngineDesc, CUDNN_BACKEND_ENGINE_DESCRIPTOR) &&
              same(kEngineCfgDesc, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) &&
              same(kConvolutionDesc, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
static_assert(same(kTHandle, CUDNN_TYPE_HANDLE) && same(kTDataType, CUDNN_TYPE_DATA_TYPE) && same(kTInt64, CUDNN_TYPE_INT64) &&
              same(kTFloat, CUDNN_TYPE_FLOAT) && same(kTDouble, CUDNN_TYPE_DOUBLE) && same(kTVoidPtr, CUDNN_TYPE_VOID_PTR) &&
              same(kTConvMode, CUDNN_TYPE_CONVOLUTION_MODE) && same(kTHeurMode, CUDNN_TYPE_HEUR_MODE) &&
              same(kTNumericalNote, CUDNN_TYPE_NUMERICAL_NOTE) && same(kTDescriptor, CUDNN_TYPE_BACKEND_DESCRIPTOR));
static_assert(same(kConvCompType, CUDNN_ATTR_CONVOLUTION_COMP_TYPE) && same(kConvMode, CUDNN_ATTR_CONVOLUTION_CONV_MODE) &&
              same(kConvDilations, CUDNN_ATTR_CONVOLUTION_DILATIONS) &&
              same(kConvFilterStrides, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES) &&
              same(kConvPostPaddings, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS) &&
              same(kConvPrePaddings, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS) &&
              same(kConvSpatialDims, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS));
static_assert(same(kHeurMode, CUDNN_ATTR_ENGINEHEUR_MODE) && same(kHeurOpGraph, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH) &&
              same(kHeurResults, CUDNN_ATTR_ENGINEHEUR_RESULTS) && same(kCfgEngine, CUDNN_ATTR_ENGINECFG_ENGINE) &&
              same(kPlanHandle, CUDNN_ATTR_EXECUTION_PLAN_HANDLE) &&
              same(kPlanEngineCfg, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG) &&
              same(kPlanWorkspaceSize, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE));
static_assert(same(kFwdAlpha, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA) &&
              same(kFwdBeta, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA) &&
              same(kFwdConvDesc, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC) &&
              same(kFwdW, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W) && same(kFwdX, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X) &&
              same(kFwdY, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y) &&
              same(kBwdDataAlpha, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA) &&
              same(kBwdDataBeta, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA) &&
              same(kBwdDataConvDesc, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC) &&
              same(kBwdDataW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W) &&
              same(kBwdDataDx, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX) &&
              same(kBwdDataDy, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY) &&
              same(kBwdFilterAlpha, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA) &&
              same(kBwdFilterBeta, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA) &&
              same(kBwdFilterConvDesc, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC) &&
              same(kBwdFilterDw, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW) &&
              same(kBwdFilterX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X) &&
              same(kBwdFilterDy, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY));
static_assert(same(kGraphHandle, CUDNN_ATTR_OPERATIONGRAPH_HANDLE) && same(kGraphOps, CUDNN_ATTR_OPERATIONGRAPH_OPS) &&
              same(kTensorAlignment, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT) &&
              same(kTensorDataType, CUDNN_ATTR_TENSOR_DATA_TYPE) && same(kTensorDims, CUDNN_ATTR_TENSOR_DIMENSIONS) &&
              same(kTensorStrides, CUDNN_ATTR_TENSOR_STRIDES) && same(kTensorUid, CUDNN_ATTR_TENSOR_UNIQUE_ID) &&
              same(kPackUids, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS) && same(kPackPointers, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) &&
              same(kPackWorkspace, CUDNN_ATTR_VARIANT_PACK_WORKSPACE) &&
              same(kEngineGlobalIndex, CUDNN_ATTR_ENGINE_GLOBAL_INDEX) &&
              same(kEngineNumericalNote, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE));
static_assert(same(kCrossCorrelation, CUDNN_CROSS_CORRELATION) && same(kHeurModeA, CUDNN_HEUR_MODE_A) &&
              same(kHeurModeFallback, CUDNN_HEUR_MODE_FALLBACK) && same(kNoteTensorCore, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) &&
              same(kNoteDownConvertInputs, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS));
static_assert(same(kTBehaviorNote, CUDNN_TYPE_BEHAVIOR_NOTE) && same(kEngineBehaviorNote, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE) &&
              same(kNoteRuntimeCompilation, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION));
}  // namespace tc::cuda
#endif
