// The "nccl" process group (distributed.h): NCCL (libnccl.so.2, dlopen'ed on first use like
// libcuda) for CUDA tensors. Rank 0 makes the NCCL unique id and hands it to the others through
// the store; each rank's communicator lives on GPU LOCAL_RANK (the tensor's device must be it).
// Collectives are enqueued on the calling thread's current tc stream of that device, so they
// order with the kernels around them as any other op does; async work is an event on it.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "library.h"
#include "runtime.h"
#include "tc/cuda.h"
#include "tc/distributed.h"
#include "tc/error.h"

namespace tc::dist {
namespace {

struct Nccl {
  bool ok = false;
  std::string why;
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
};

const Nccl& nccl() {
  static Nccl* n = [] {
    auto* n = new Nccl{};
    std::vector<std::string> cands;
    if (const char* e = std::getenv("TC_NCCL_PATH")) cands.push_back(e);
    cands.push_back("libnccl.so.2");
    cands.push_back("libnccl.so");
    std::string errs;
    void* h = cuda::open_first(cands, &errs);
    if (!h) {
      n->why = "cannot load NCCL (libnccl.so.2; set TC_NCCL_PATH to its path): " + errs;
      return n;
    }
    auto get = [&](const char* name, auto& fp) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      return fp != nullptr;
    };
    n->ok = get("ncclGetVersion", n->GetVersion) && get("ncclGetUniqueId", n->GetUniqueId) &&
            get("ncclCommInitRank", n->CommInitRank) && get("ncclCommDestroy", n->CommDestroy) &&
            get("ncclCommAbort", n->CommAbort) && get("ncclCommGetAsyncError", n->CommGetAsyncError) &&
            get("ncclGetErrorString", n->GetErrorString) && get("ncclAllReduce", n->AllReduce) &&
            get("ncclBroadcast", n->Broadcast) && get("ncclAllGather", n->AllGather) &&
            get("ncclReduceScatter", n->ReduceScatter);
    get("ncclGetLastError", n->GetLastError);  // optional
    if (!n->ok) n->why = "the NCCL library found lacks entry points (NCCL >= 2.10 is needed)";
    return n;
  }();
  return *n;
}

void check(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string detail = nccl().GetErrorString(r);
  if (comm && nccl().GetLastError) {
    const char* last = nccl().GetLastError(comm);
    if (last && *last) detail += std::string(": ") + last;
  }
  TC_FAIL(DeviceError, "tc.distributed.%s: NCCL failed: %s", what, detail.c_str());
}

ncclDataType_t nccl_type(DType t, const char* what) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8:
    case DType::Bool: return ncclUint8;
    default: TC_FAIL(DTypeError, "tc.distributed.%s: NCCL has no %s", what, dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, const char* what) {
  TC_CHECK(t != DType::Bool || op == ReduceOp::Max || op == ReduceOp::Min, DTypeError,
           "tc.distributed.%s: bool tensors reduce with \"max\" (any) or \"min\" (all) only", what);
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg:
      TC_CHECK(is_floating(t), ValueError, "tc.distributed.%s: op \"avg\" needs a floating-point tensor, got %s",
               what, dtype_name(t));
      return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

class EventWork final : public Work {
 public:
  explicit EventWork(int device) : device_(device) {
    cuda::check(cuda::drv().EventCreate(&ev_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cuda::check(cuda::drv().EventRecord(ev_, cuda::current(device)), "cuEventRecord");
  }
  ~EventWork() override { cuda::drv().EventDestroy(ev_); }
  void wait() override {
    cuda::check(cuda::drv().StreamWaitEvent(cuda::current(device_), ev_, 0), "cuStreamWaitEvent");
  }
  bool is_completed() override { return cuda::drv().EventQuery(ev_) == CUDA_SUCCESS; }

 private:
  int device_;
  CUevent ev_ = nullptr;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<Store> store, int rank, int world_size, int device)
      : ProcessGroup(rank, world_size), store_(std::move(store)), device_(device) {
    ncclUniqueId id;
    if (rank == 0) {
      check(nccl().GetUniqueId(&id), "init_process_group");
      store_->set("nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      std::string b = store_->get("nccl/id");
      TC_CHECK(b.size() == sizeof id, DeviceError, "tc.distributed: a malformed NCCL id came through the store");
      std::memcpy(&id, b.data(), sizeof id);
    }
    cuda::dev(device_);  // NCCL runs on the current context: this rank's GPU
    check(nccl().CommInitRank(&comm_, world_size, id, rank), "init_process_group");
  }
  ~NcclGroup() override { shutdown(); }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    CUstream s = stream_for(t, "all_reduce");
    check(nccl().AllReduce(t.data_ptr(), t.data_ptr(), count(t), nccl_type(t.dtype(), "all_reduce"),
                           nccl_op(op, t.dtype(), "all_reduce"), comm_, s),
          "all_reduce", comm_);
    t.bump_version();
    return std::make_unique<EventWork>(device_);
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int src) override {
    TC_CHECK(src >= 0 && src < world_size_, ValueError, "tc.distributed.broadcast: src %d is not a rank (world size %d)",
             src, world_size_);
    CUstream s = stream_for(t, "broadcast");
    check(nccl().Broadcast(t.data_ptr(), t.data_ptr(), count(t), nccl_type(t.dtype(), "broadcast"), src, comm_, s),
          "broadcast", comm_);
    t.bump_version();
    return std::make_unique<EventWork>(device_);
  }
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& t) override {
    CUstream s = stream_for(t, "all_gather");
    stream_for(out, "all_gather");
    TC_CHECK(out.dtype() == t.dtype(), DTypeError, "tc.distributed.all_gather: the output is %s, the input %s", dtype_name(out.dtype()), dtype_name(t.dtype()));
    TC_CHECK(out.numel() == t.numel() * world_size_, ValueError,
             "tc.distributed.all_gather: the output needs world_size * %lld elements of %s", (long long)t.numel(),
             dtype_name(t.dtype()));
    check(nccl().AllGather(t.data_ptr(), out.data_ptr(), count(t), nccl_type(t.dtype(), "all_gather"), comm_, s),
          "all_gather", comm_);
    out.bump_version();
    return std::make_unique<EventWork>(device_);
  }
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    CUstream s = stream_for(in, "reduce_scatter");
    stream_for(out, "reduce_scatter");
    TC_CHECK(out.dtype() == in.dtype(), DTypeError, "tc.distributed.reduce_scatter: the output is %s, the input %s", dtype_name(out.dtype()), dtype_name(in.dtype()));
    TC_CHECK(in.numel() == out.numel() * world_size_, ValueError,
             "tc.distributed.reduce_scatter: the input needs world_size * %lld elements of %s",
             (long long)out.numel(), dtype_name(out.dtype()));
    check(nccl().ReduceScatter(in.data_ptr(), out.data_ptr(), count(out), nccl_type(in.dtype(), "reduce_scatter"),
                               nccl_op(op, in.dtype(), "reduce_scatter"), comm_, s),
          "reduce_scatter", comm_);
    out.bump_version();
    return std::make_unique<EventWork>(device_);
  }
  void barrier() override {
    // As torch's NCCL barrier: an all-reduce of one element, waited for on the host.
    Tensor one = Tensor::empty({1}, DType::Float32, Device{DeviceType::CUDA, device_});
    cuda::check(cuda::drv().MemsetD8Async((CUdeviceptr)one.data_ptr(), 0, 4, cuda::current(device_)), "cuMemsetD8Async");
    all_reduce(one, ReduceOp::Sum);
    cuda::check(cuda::drv().StreamSynchronize(cuda::current(device_)), "cuStreamSynchronize");
  }
  void shutdown() override {
    if (!comm_) return;
    cuda::dev(device_);
    cuda::drv().StreamSynchronize(cuda::current(device_));
    nccl().CommDestroy(comm_);
    comm_ = nullptr;
  }

 private:
  static size_t count(const Tensor& t) { return (size_t)t.numel(); }

  CUstream stream_for(const Tensor& t, const char* what) {
    TC_CHECK(comm_, ValueError, "tc.distributed.%s: the process group was destroyed", what);
    TC_CHECK(t.device().is_cuda() && t.device().index == device_, DeviceError,
             "tc.distributed.%s: the nccl backend of rank %d works on cuda:%d, got a tensor on %s", what, rank_,
             device_, t.device().str().c_str());
    TC_CHECK(t.is_contiguous(), ValueError, "tc.distributed.%s: the tensor must be contiguous", what);
    return cuda::current(device_);
  }

  std::shared_ptr<Store> store_;
  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available(std::string* why) {
  const Nccl& n = nccl();
  if (!n.ok && why) *why = n.why;
  return n.ok;
}

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int world_size,
                                              double timeout_s) {
  (void)timeout_s;
  std::string why;
  TC_CHECK(cuda::is_available(&why), DeviceError, "tc.distributed: backend \"nccl\" needs a GPU: %s", why.c_str());
  TC_CHECK(nccl_available(&why), DeviceError, "tc.distributed: backend \"nccl\": %s", why.c_str());
  // One GPU per rank, LOCAL_RANK's (as torchrun sets it), or the rank's on a single node.
  int local = rank;
  if (const char* e = std::getenv("LOCAL_RANK")) local = std::atoi(e);
  int n = cuda::device_count();
  TC_CHECK(local < n, DeviceError,
           "tc.distributed: rank %d needs GPU %d (LOCAL_RANK) but this machine has %d; NCCL needs one GPU per rank",
           rank, local, n);
  return std::make_shared<NcclGroup>(std::move(store), rank, world_size, local);
}

}  // namespace tc::dist
