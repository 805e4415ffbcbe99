// Distributed runtime (tc.distributed, LUA_API.md §9): a TCP key-value store for rendezvous, and
// process groups whose collectives run on NCCL for CUDA tensors (libnccl loaded with dlopen on
// first use, like libcuda) or over the store for CPU tensors ("gloo" in tc is that store
// transport: meant for tests and small CPU runs, not for bandwidth).
//
//   auto store = Store::connect("127.0.0.1", 29500, /*is_master=*/rank == 0, timeout_s, rank);
//   store->set("key", bytes); std::string v = store->get("key");   // get waits for the key
//   auto pg = ProcessGroup::create("nccl", store, rank, world_size, timeout_s);
//   pg->all_reduce(t, ReduceOp::Sum);   // in place, on the tensor's device's current stream
//
// Every collective is checked across ranks before any data moves: each rank sends a description
// of its call (kind, dtype, shape, reduce op, source) and the call raises the same ValueError on
// every rank when they differ (on gloo inside the data exchange itself, on nccl through one store
// round trip per collective unless `check` is off). A rank whose store connection closes before
// destroy_process_group (it failed, was killed or exited) fails every other rank's pending and
// later waits at once, with a DeviceError naming it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tc/tensor.h"

namespace tc::dist {

// A blocking key-value store over TCP. The master rank serves it on a thread of its own process;
// every rank (the master too) talks to it through a client connection. Operations wait at most
// `timeout_s` for the server or a key, then raise DeviceError("... timed out ...").
class Store {
 public:
  // rank >= 0: this connection is that rank's; if it closes before leave(), every other rank's
  // pending and later waits (get of a missing key, gather) fail at once saying that rank left.
  static std::shared_ptr<Store> connect(const std::string& host, int port, bool is_master,
                                        double timeout_s, int rank = -1);
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;             // waits until the key is set
  virtual int64_t add(const std::string& key, int64_t delta) = 0;  // atomic; returns the new value
  virtual bool check(const std::string& key) = 0;                  // set yet? (never waits)
  virtual void erase(const std::string& key) = 0;

  // One round of an all-gather: every rank sends (label, value) under `key`; once all
  // world_size ranks have, each gets every rank's pair in rank order. A round not complete within
  // the timeout fails on every rank that came, naming the ranks that did not and what the others
  // called (their labels). `what` begins its errors ("tc.distributed.all_reduce").
  struct Part {
    std::string label, value;
  };
  virtual std::vector<Part> gather(const std::string& key, int rank, int world_size,
                                   const std::string& label, const std::string& value,
                                   const std::string& what) = 0;
  virtual void leave() = 0;  // this rank leaves cleanly (destroy_process_group)
};

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min, Product };
ReduceOp parse_reduce_op(const std::string& name);  // "sum", "avg", "max", "min", "product"

// An in-flight collective: wait() makes the caller's current stream wait for it (CUDA) or returns
// at once (CPU, whose collectives complete before they return).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  // backend: "nccl" (CUDA tensors) or "gloo" (CPU tensors over the store). Raises DeviceError
  // with the reason when NCCL or the GPU for this rank is missing. check = false skips nccl's
  // per-collective store round trip (gloo's check is part of its exchange and always on).
  static std::shared_ptr<ProcessGroup> create(const std::string& backend,
                                              std::shared_ptr<Store> store, int rank,
                                              int world_size, double timeout_s, bool check = true);
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;

  // Every tensor contiguous, on the group's device kind, same dtype and size on every rank.
  virtual std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> broadcast(Tensor& t, int src) = 0;
  // out: world_size * t.numel() elements, rank r's block at r * numel.
  virtual std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& t) = 0;
  // in: world_size * out.numel() elements; rank r receives the reduction of everyone's block r.
  virtual std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) = 0;
  virtual void barrier() = 0;
  virtual void shutdown() = 0;  // idempotent
  // Every rank's bytes, in rank order (host-side metadata: DDP's model check); the base class
  // has none (the groups create() returns all do).
  virtual std::vector<std::string> all_gather_bytes(const std::string& mine);

 protected:
  ProcessGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank_, world_size_;
};

#ifdef TC_HAVE_CUDA
// stdlib/cuda/nccl.cpp
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank,
                                              int world_size, double timeout_s);
bool nccl_available(std::string* why);
#endif

}  // namespace tc::dist
