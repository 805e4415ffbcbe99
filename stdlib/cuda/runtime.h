// Internal interface of the CUDA runtime (stdlib/cuda): the driver entry points (resolved with
// cuGetProcAddress after dlopen), per-device state (primary context, its streams, an error word
// for device-side checks), the caching allocator's hooks, kernel compilation through NVRTC with in-memory and on-disk caches,
// launches, and the group kernels that cuda_dispatch calls.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tc/cuda.h"
#include "tc/cuda_graph.h"
#include "tc/ops.h"

namespace tc::cuda {

// Driver entry points. Member names avoid cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2 ...).
struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamQuery)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  // stream capture and CUDA graphs (graphs.cpp)
  CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*StreamEndCapture)(CUstream, CUgraph*);
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*GraphGetNodes)(CUgraph, CUgraphNode*, size_t*);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned);
  CUresult (*MemFreeHost)(void*);
  // optional (null when the driver lacks them): the range an external profiler records when it
  // starts with profiling off (ncu --profile-from-start off)
  CUresult (*ProfilerStart)();
  CUresult (*ProfilerStop)();
};
const Driver& drv();  // ensure_initialized() first

// dlopen of a CUDA toolkit library (cuBLAS, cuBLASLt: "libcublas.so.13") from $TC_CUDA_PATH,
// $CUDA_PATH, $CUDA_HOME (their lib64/), /usr/local/cuda/lib64, then the loader's path (also
// the unversioned name). Null with the loader's first error in `error` when none loads.
void* open_toolkit_library(const std::string& soname, std::string* error);

// Throws for a failed driver call: OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY, else a
// DeviceError naming `what` and the driver's error name and text.
void check(CUresult r, const char* what);

struct DeviceState {
  int index = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUstream streams[1 + Stream::kPoolStreams] = {};  // [0] the default stream; pool streams on first use
  int next_pool = 0;                                 // round-robin position in the pool
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  std::string name;
  CUdeviceptr error_word = 0;  // 2 x int64: [0] flag, [1] detail (device-side checks)
};
// Initialized state of device `index` (DeviceError if out of range), its context made current.
DeviceState& dev(int index);

// Streams (stdlib/cuda/stream.cpp). The id of the calling thread's current stream on `device`,
// and the CUstream of a stream (created on first use; null in compile-only mode).
int current_stream_id(int device);
CUstream stream_handle(int device, int id);
// The calling thread's current CUstream on `device`: where every launch, copy, library call and
// allocation goes. Makes the device's context current.
inline CUstream current(int device) { return stream_handle(device, current_stream_id(device)); }

// Device memory from the caching allocator (stdlib/cuda/allocator.cpp) for the current stream
// (OutOfMemoryError with figures when exhausted even after freeing every cached block).
void* raw_alloc(size_t nbytes, int device);
// The size class of n bytes, the memory a block for them takes: 512-byte steps up to 1 MiB, then
// four classes per power of two (at most 25% slack). Pinned host blocks use the same classes.
size_t size_class(size_t n);
void raw_free(void* p, int device);  // never throws (called from storage destructors)
// Pinned host memory (pinned.cpp): after a host-to-device copy from src on stream s of `device`,
// records the copy in src's pinned block (if src is pinned: nothing otherwise) so that the block
// is not reused before it ran, and waits for it unless a NonBlocking scope lives.
void after_copy_from_host(const void* src, int device, CUstream s);
void empty_host_cache();  // frees the cached pinned blocks to the driver

// ---- CUDA graph capture (graphs.cpp; the pool in allocator.cpp) -----------------------------
// The private memory of one captured graph: while it is the calling thread's capture pool,
// raw_alloc on its device takes blocks from it (new ones from the driver, never the shared
// cache) and raw_free gives them back to it, so kernels recorded in the graph only ever touch
// memory the graph owns; blocks of the shared cache freed meanwhile are held back until the
// pool is released (the graph may read them). Nothing is synchronized or freed to the driver
// while capturing.
struct GraphPool;
GraphPool* graph_pool_create(int device);
// The graph is gone: the pool's blocks (and the held-back ones) go back to the driver after the
// device finished its work, each once no tensor holds it. Never throws.
void graph_pool_release(GraphPool* p);
void set_capture_pool(GraphPool* p);  // null: capture over (the calling thread)
// Called by everything that waits for the device or reads device memory on the host (stream and
// event synchronization, device-to-host and host-to-device copies, the device error word, freeing
// to the driver): while the calling thread captures a graph, marks the capture broken with `what`
// and throws DeviceError, so that the capture is abandoned instead of recording a wrong graph.
void forbid_in_capture(const char* what);
bool capturing();                     // whether the calling thread is capturing
// A host-to-device copy under capture: the source bytes copied into pinned memory that the
// capturing graph owns, whose address the recorded copy reads at every replay. Host data that a
// GPU graph uploads is made from shapes, constants and addresses (all fixed for the graph:
// reading device values would have abandoned the capture), so the recorded bytes stay right.
const void* stage_host_bytes_in_capture(const void* src, size_t n);
// take_device_error under capture: the graph notes that its replays must read the device error
// word (true), instead of a synchronization inside the capture. False when not capturing.
// `decode`, when the check can tell what a flag means without its inputs (the flag's code and
// value, as the generated kernels' index checks and the eager kernels' own checks can), raises
// the checked op's error for a flag read after a replay, and returns for a flag it does not
// make; a graph whose every check has one needs no wait (CudaGraph::check_later).
bool note_device_check_in_capture(DeviceCheckDecoder decode = {});
bool graph_pool_has_device_checks(const GraphPool* p);
// The graph's decoder: its checks' decoders asked in recording order (they share the word's
// codes: the first that recognizes a flag raises); empty if a check has none.
DeviceCheckDecoder graph_pool_check_decoder(const GraphPool* p);
// The checks noted so far in the calling thread's capture (0 when not capturing), and a wrapper
// for the decoders of those noted since `first` (an eager kernel's, run for a graph node, raise
// errors that name no node: the caller adds it).
int capture_device_checks();
void wrap_capture_device_checks(int first, const std::function<DeviceCheckDecoder(DeviceCheckDecoder)>& wrap);
const char* capture_broken_by();      // the `what` of the last forbid_in_capture on this thread, or null
void clear_capture_broken();

// ---- kernels --------------------------------------------------------------------------------
// Compiles `source` (all entry points of one op signature) for the device's architecture once
// per process (and per TC_CACHE_DIR entry on disk) and returns the entry points in `names`
// order. `key` names the signature (the in-memory cache key); the source is produced only on
// a miss. NVRTC failures raise CompileError with the log.
std::vector<CUfunction> kernels(int device, const std::string& key, const std::function<std::string()>& source,
                                const std::vector<std::string>& names);
// NVRTC only (no driver, no GPU needed): the cubin of `source` for sm_<arch>, CompileError on
// failure, DeviceError if NVRTC cannot be loaded.
std::string compile_cubin(const std::string& source, int arch);
bool nvrtc_available(std::string* why);
std::string nvrtc_version();
// The prelude every generated program starts with (types, conversions, math overloads).
const std::string& prelude();
const std::string& block_sum_src();  // __device__ block_sum(double, double* sm)

// Blocks for a grid-stride loop over n elements: enough to cover them, at most per_sm blocks per
// SM, at least one.
unsigned grid_for(int64_t n, int device, int64_t block = 256, int64_t per_sm = 32);
// Launch on the device's current stream: 1-D grid of `grid` blocks of `block` threads.
void launch(int device, CUfunction f, unsigned grid, unsigned block, void** args, unsigned smem = 0);
void launch3(int device, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, void** args,
             unsigned smem = 0);
// Keeps the device's current stream busy for about `us` microseconds (one thread spinning on
// clock64, ~2 GHz assumed): work enqueued behind it then runs back to back, so events around it
// time the device alone, not the host's pace (cuDNN's plan timing, TC_CUDA_PROFILE).
void spin(int device, double us);
// The pick among timed candidates (cuDNN's plans, cuBLASLt's algorithms): the fastest of the
// first n times, or the first (the library's heuristic pick, when `first_eligible`) while its
// time is within `slack` (1.05: 5 %) of the fastest's, so the choice stays stable from run to run.
size_t fastest_keeping_first(const std::vector<double>& t, size_t n, double slack, bool first_eligible);
// Reads and clears the device error word after the current stream finished: 0 if no kernel
// flagged. (One word per device: a kernel that failed on another stream may be reported here.)
// A CUDA graph replay that flagged the word before is reported first, as its op's error
// (raise_replay_errors).
int64_t take_device_error(int device, int64_t* detail);
// The codes with which eager kernels flag the device error word (the detail is the offending
// value, or 0): negative, apart from the generated programs' check numbers (1, 2, ...), so that
// the decoders of a CUDA graph's checks tell their flags apart.
constexpr int64_t kFlagIndex = -1, kFlagTarget = -2, kFlagProbability = -3, kFlagZeroDivision = -4;
// The check after an eager op's kernels: outside a capture, take_device_error and `raise` with a
// flag (it raises the op's error; a flag it does not recognize is a DeviceError); under capture,
// `raise` becomes the check's decoder (note_device_check_in_capture): no wait either way there.
void check_device_errors(int device, const DeviceCheckDecoder& raise);
// A compiled graph's own checks (positive codes), flagged by one of its generated kernels and read
// first by an eager op that the graph runs after it: while one of these lives on this thread,
// check_device_errors gives a code its op does not recognize to `decode` before calling it unknown.
class OuterDeviceChecks {
 public:
  explicit OuterDeviceChecks(DeviceCheckDecoder decode);
  ~OuterDeviceChecks();
  OuterDeviceChecks(const OuterDeviceChecks&) = delete;
  OuterDeviceChecks& operator=(const OuterDeviceChecks&) = delete;

 private:
  DeviceCheckDecoder decode_;
  const DeviceCheckDecoder* previous_;
};
void sync_stream(int device);  // waits for the current stream

// ---- group kernels (stdlib/cuda/<group>.cpp); nullopt-like empty Stack = not handled --------
bool pointwise(Op op, const Stack& a, const Metas& m, Stack* out);
bool reduction(Op op, const Stack& a, const Metas& m, Stack* out);
bool movement(Op op, const Stack& a, const Metas& m, Stack* out);
bool linalg(Op op, const Stack& a, const Metas& m, Stack* out);
bool nn(Op op, const Stack& a, const Metas& m, Stack* out);
bool creation(Op op, const Stack& a, const Metas& m, Stack* out);
// conv1d/conv2d/conv_transpose2d and the pools (stdlib/cuda/conv.cpp), called by linalg().
bool conv_pool(Op op, const Stack& a, const Metas& m, Stack* out);
// A convolution problem (conv1d as H = KH = 1): x (N, C, H, W) -> y (N, O, OH, OW), groups G.
// Transposed: x (N, C, H, W) -> y (N, O, OH, OW) with weight (C, O/G, KH, KW).
// Weight gradient (wgrad): the filter (O, C/G, KH, KW) of the forward problem from x and dy.
struct ConvProblem {
  bool transposed = false;
  DType dt = DType::Float32;
  int64_t N, C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW;
  bool wgrad = false;
  // Forward only: x and y channels-last (NHWC strides, is_channels_last), the weight contiguous
  // (O, C/G, KH, KW); no layout copies of x or y.
  bool channels_last = false;
};
// cuDNN convolution (stdlib/cuda/cudnn.cpp) of contiguous x, w, y of dtype p.dt, bias (O) or an
// undefined tensor; for p.wgrad, w is written from x and y (dy), and bias is undefined. False (nothing written) when cuDNN is absent, disabled (TC_CUDNN_DISABLE=1)
// or rejects the problem: the caller then runs its own path.
bool cudnn_conv(const ConvProblem& p, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
// Whether a 4-D tensor's strides are channels-last (NHWC) and dense: [H*W*C, 1, W*C, C] (dims of
// size 1 any).
bool is_channels_last(const Tensor& t);
// An uninitialized tensor of sizes s (N, C, H, W) laid out channels-last.
Tensor empty_channels_last(const Shape& s, DType dt, Device device);
// A 4-D t as it is when channels-last, else a channels-last copy of it (the layout's boundary:
// a graph input, or a value stored contiguous).
Tensor as_channels_last(const Tensor& t);
// conv2d(input, weight, bias, stride, padding, dilation, groups) (the op's arguments, bound)
// writing a channels-last result: cuDNN on a channels-last input (a contiguous one is copied
// into that layout first); where cuDNN declines, the op's own result copied into the layout.
// A 1x1 convolution of stride 1 without padding and groups is the matrix product
// [N*H*W, C] @ w[O, C]^T of its channels-last operands, run by cuBLASLt (matmul_act: its
// algorithms timed once per problem; on an H200, eight of ResNet-50's nine 1x1 problems took
// 1-5 % less device time than with cuDNN's channels-last engines, one 1 % more);
// TC_CUDA_CONV1X1_GEMM=0 leaves them to cuDNN.
// The CUDA backend's layout choice (backends/cuda/cuda_layout.h) calls it; its compiled call
// works out the ConvLast of a call site once (conv2d_channels_last_setup: the result's meta and
// the problem, from the arguments' shapes and constants) and runs conv2d_channels_last(a, c) per
// call, so a call does no shape work of its own.
struct ConvLast {
  Shape out;  // the result's sizes [N, O, OH, OW]
  DType dt = DType::Float32;
  ConvProblem p{};
  bool library = false;  // input 4-D, input and weight of the result's dtype: cuBLASLt or cuDNN may run it
  bool product = false;  // a 1x1 convolution of stride 1, no padding, one group: a matrix product
};
ConvLast conv2d_channels_last_setup(const Stack& a);
Tensor conv2d_channels_last(const Stack& a, const ConvLast& c);
bool cudnn_available(std::string* why);
// cat of contiguous inputs of the output's dtype in one launch (stdlib/cuda/cat.cpp), tried by
// cuda_dispatch before movement(); false: not such a case, nothing done.
bool cat_contiguous(const Stack& a, const TensorMeta& m, Stack* out);
// sort and topk (stdlib/cuda/sort.cpp), called by reduction().
bool sort_topk(Op op, const Stack& a, const Metas& m, Stack* out);
// Losses (stdlib/cuda/loss.cpp), called by nn().
bool loss(Op op, const Stack& a, const Metas& m, Stack* out);
// batch_norm with batch statistics as one kernel (stdlib/cuda/batch_norm.cpp) of contiguous x into
// contiguous out, a: batch_norm's arguments; relu: out = relu(batch_norm(x)) (the CUDA backend's
// fused call). False (nothing done) when its parameters are not contiguous CUDA vectors of one
// dtype. And _batch_norm_backward (m: its metas); with relu_result defined, of the output gradient
// a[0] * (relu_result > 0) (relu's derivative folded in: the CUDA backend's fused call).
bool batch_norm_train(const Tensor& x, const Stack& a, const Tensor& out, bool relu = false);
bool batch_norm_backward(const Stack& a, const Metas& m, Stack* out, const Tensor& relu_result = Tensor());
// interpolate (stdlib/cuda/interpolate.cpp), called by nn().
bool interpolate(const Stack& a, const TensorMeta& m, Stack* out);
// The optimizer-step ops, _fused_sgd_ ... (stdlib/cuda/optim.cpp), called by nn().
bool fused_optim(Op op, const Stack& a, Stack* out);
// einsum (stdlib/cuda/einsum.cpp), called by linalg().
bool einsum(const Stack& a, const Metas& m, Stack* out);
// Fused float32 attention (stdlib/cuda/attention.cpp): out = softmax(q k^T * scale [causal mask,
// keys j <= query i]) v for q (..., L, E), k and v (..., S, E) with equal batch dims (1 or 2 of
// any strides), unit stride along E, E <= 128 and a multiple of 4; out likewise (any strides but
// the last). False (nothing written) when the problem is outside that or
// TC_FLASH_ATTENTION_DISABLE=1.
bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out);
// dropout with the CPU's bernoulli(1 - p) stream (stdlib/cuda/creation.cpp).
Tensor dropout_cuda(const Tensor& x, double p, const TensorMeta& m);

// Device-side strided copy with dtype conversion and broadcasting of src to dst's shape
// (same device). Both may be any strides.
void copy_strided(const Tensor& dst, const Tensor& src);
// Tensor::copy_from for copies involving a cuda tensor (any direction, strides, dtypes).
void copy_tensor(const Tensor& dst, const Tensor& src);
// A contiguous device copy of t in dtype dt (t itself if already so).
Tensor contiguous_as(const Tensor& t, DType dt);
// Fills a contiguous tensor with a value given as double or int64 (by dtype).
void fill(const Tensor& t, double v, int64_t iv, bool is_int);

// The C names of dtypes in generated code: storage type and compute (opmath) type.
const char* ctype(DType t);
const char* mtype(DType t);

// Counts of ops that ran natively vs through the host fallback (for tests and reports).
struct DispatchStats {
  int64_t native = 0, fallback = 0;
};
DispatchStats& dispatch_stats();
// TC_CUDA_PROFILE=1: per op, the calls, host microseconds inside cuda_dispatch and kernel
// launches (ours, not cuDNN's or cuBLAS's); =2 also waits for the stream after every op, so the
// time includes the GPU's work. A table on stderr at exit: where eager CUDA time goes, without
// a profiler on the GPU machine.
int profile_level();
void profile_op(Op op, double us, int64_t launches);
const char*& last_conv_impl_slot();

}  // namespace tc::cuda
