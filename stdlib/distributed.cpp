// tc.distributed's process groups (distributed.h): reduce-op names, the check every collective
// makes across ranks, the "gloo" group, whose collectives exchange CPU tensors through the store,
// and the checking wrapper around the "nccl" group (stdlib/cuda/nccl.cpp). The store itself is
// distributed_store.cpp.
//
// The check: a collective is one round of Store::gather in which each rank sends a label of its
// call ("all_reduce(float32[3], sum)"), and on gloo its data too. When the labels differ, every
// rank raises the same ValueError listing each rank's call, and no tensor is written. A rank whose
// own arguments are invalid still takes part in the round (its label says why it failed), so the
// others fail with it instead of waiting. On nccl the round carries labels only and costs one store
// round trip (and a rendezvous of the ranks' host threads) before each NCCL call;
// init_process_group{check_collectives = false} turns it off there.
#include "tc/distributed.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>

#include "tc/error.h"
#include "tc/ops.h"

namespace tc::dist {
namespace {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Product:
      return "product";
  }
  return "?";
}

// "float32[2, 3]"
std::string describe(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype())) + "[";
  for (size_t i = 0; i < t.sizes().size(); i++) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + "]";
}

// The sequence of collectives of one group, each a checked round through the store.
class Rounds {
 public:
  Rounds(std::shared_ptr<Store> store, int rank, int world_size)
      : store_(std::move(store)), rank_(rank), world_size_(world_size) {}

  // One collective: runs this rank's argument checks (`validate`), sends the label (and, if the
  // arguments are valid, `payload()`), and returns every rank's part once all labels agree.
  std::vector<Store::Part> run(const char* name, std::string label,
                               const std::function<void()>& validate,
                               const std::function<std::string()>& payload) {
    std::exception_ptr invalid;
    try {
      if (validate) validate();
    } catch (const Error& e) {
      invalid = std::current_exception();
      label += " (it failed there: " + std::string(e.what()) + ")";
    }
    std::string data = !invalid && payload ? payload() : std::string();
    uint64_t s = seq_++;
    std::string what = std::string("tc.distributed.") + name;
    std::vector<Store::Part> parts =
        store_->gather("c/" + std::to_string(s), rank_, world_size_, label, data, what);
    if (invalid) std::rethrow_exception(invalid);
    bool agree = true;
    for (const Store::Part& p : parts) agree = agree && p.label == parts[0].label;
    if (!agree) {
      // ranks with the same call together, in order of their first rank
      std::vector<std::pair<std::string, std::vector<int>>> calls;
      for (int r = 0; r < world_size_; r++) {
        auto it = calls.begin();
        while (it != calls.end() && it->first != parts[r].label) ++it;
        if (it == calls.end())
          calls.push_back({parts[r].label, {r}});
        else
          it->second.push_back(r);
      }
      std::string list;
      for (auto& [call, ranks] : calls) {
        list += list.empty() ? "" : "; ";
        list += ranks.size() == 1 ? "rank " : "ranks ";
        for (size_t i = 0; i < ranks.size(); i++)
          list += (i ? ", " : "") + std::to_string(ranks[i]);
        list += " called " + call;
      }
      TC_FAIL(ValueError,
              "%s: the ranks disagree on collective #%llu of the group: %s. Every rank must "
              "make the same collective calls in the same order, with tensors of the same dtype "
              "and shape",
              what.c_str(), (unsigned long long)s + 1, list.c_str());
    }
    return parts;
  }

  std::vector<std::string> all_gather_bytes(const std::string& mine) {
    std::vector<std::string> out;
    for (Store::Part& p :
         run("all_gather_object", "all_gather_object()", nullptr, [&] { return mine; }))
      out.push_back(std::move(p.value));
    return out;
  }

  // destroy_process_group (idempotent): a last round, then rank 0's store (and its server) may go
  // away only after every rank is done with it: each rank counts itself out, the last one says
  // so, rank 0 waits for that.
  void shutdown() {
    if (done_) return;
    done_ = true;
    run("destroy_process_group", "destroy_process_group()", nullptr, nullptr);
    store_->leave();
    if (store_->add("shutdown/count", 1) == world_size_) store_->set("shutdown/all", "");
    if (rank_ == 0) store_->get("shutdown/all");
  }

 private:
  std::shared_ptr<Store> store_;
  int rank_, world_size_;
  uint64_t seq_ = 0;
  bool done_ = false;
};

// Argument checks common to both backends (nccl's own, after the round, concern only what every
// rank has alike once the labels agree: its dtypes and ops).
// gpu: -1 on gloo (CPU tensors), the rank's GPU on nccl.
void check_tensor(const Tensor& t, int gpu, const char* what) {
  if (gpu >= 0) {
    TC_CHECK(
        t.device().is_cuda() && t.device().index == gpu, DeviceError,
        "tc.distributed.%s: the nccl backend of this rank works on cuda:%d, got a tensor on %s",
        what, gpu, t.device().str().c_str());
  } else {
    TC_CHECK(t.device().is_cpu(), DeviceError,
             "tc.distributed.%s: the gloo backend takes CPU tensors, got one on %s (use backend "
             "\"nccl\" for CUDA)",
             what, t.device().str().c_str());
  }
  TC_CHECK(t.is_contiguous(), ValueError, "tc.distributed.%s: the tensor must be contiguous", what);
}
void check_avg(const Tensor& t, ReduceOp op, const char* what) {
  TC_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), ValueError,
           "tc.distributed.%s: op \"avg\" needs a floating-point tensor, got %s", what,
           dtype_name(t.dtype()));
}
// all_gather's output holds world_size blocks the size of its input; reduce_scatter's input
// world_size blocks the size of its output.
void check_blocks(const Tensor& out, const Tensor& in, bool out_is_whole, int world_size, int gpu,
                  const char* what) {
  check_tensor(in, gpu, what);
  check_tensor(out, gpu, what);
  TC_CHECK(out.dtype() == in.dtype(), DTypeError,
           "tc.distributed.%s: the output is %s, the input %s", what, dtype_name(out.dtype()),
           dtype_name(in.dtype()));
  const Tensor& whole = out_is_whole ? out : in;
  const Tensor& block = out_is_whole ? in : out;
  TC_CHECK(whole.numel() == block.numel() * world_size, ValueError,
           "tc.distributed.%s: the %s needs world_size * %lld elements of %s", what,
           out_is_whole ? "output" : "input", (long long)block.numel(), dtype_name(block.dtype()));
}
void check_src(int src, int world_size) {
  TC_CHECK(src >= 0 && src < world_size, ValueError,
           "tc.distributed.broadcast: src %d is not a rank (world size %d)", src, world_size);
}

std::string all_reduce_label(const Tensor& t, ReduceOp op) {
  return "all_reduce(" + describe(t) + ", " + reduce_op_name(op) + ")";
}
std::string broadcast_label(const Tensor& t, int src) {
  return "broadcast(" + describe(t) + ", src " + std::to_string(src) + ")";
}
std::string all_gather_label(const Tensor& t) {
  return "all_gather(" + describe(t) + ")";
}
std::string reduce_scatter_label(const Tensor& out, ReduceOp op) {
  return "reduce_scatter(" + describe(out) + ", " + reduce_op_name(op) + ")";
}

// ---- "gloo": CPU collectives through the store -------------------------------------------------
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), (size_t)t.numel() * t.itemsize());
}

// The labels agreed, so every rank's buffer has the size of this rank's.
void check_size(const std::string& bytes, size_t expected) {
  TC_CHECK(bytes.size() == expected, ValueError,
           "tc.distributed: internal error: %zu bytes received where the ranks agreed on %zu",
           bytes.size(), expected);
}

Tensor tensor_of(const std::string& bytes, const Tensor& like, int64_t numel) {
  Tensor t = Tensor::empty({numel}, like.dtype());
  check_size(bytes, (size_t)numel * like.itemsize());
  if (numel) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Copies the n elements of a 1-D result into contiguous dst (in dst's dtype).
void store_into(Tensor& dst, const Tensor& src) {
  Tensor s = src.to(dst.dtype()).contiguous();
  if (dst.numel()) std::memcpy(dst.data_ptr(), s.data_ptr(), (size_t)dst.numel() * dst.itemsize());
  dst.bump_version();
}

// acc (op)= x, in the dtype of acc.
Tensor combine(const Tensor& acc, const Tensor& x, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return call1(Op::add, {acc, x});
    case ReduceOp::Max:
      return call1(Op::maximum, {acc, x});
    case ReduceOp::Min:
      return call1(Op::minimum, {acc, x});
    case ReduceOp::Product:
      return call1(Op::mul, {acc, x});
  }
  return acc;
}

class StoreGroup final : public ProcessGroup {
 public:
  StoreGroup(std::shared_ptr<Store> store, int rank, int world_size)
      : ProcessGroup(rank, world_size), rounds_(std::move(store), rank, world_size) {}
  std::string backend() const override { return "gloo"; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    auto all = rounds_.run(
        "all_reduce", all_reduce_label(t, op),
        [&] {
          check_tensor(t, -1, "all_reduce");
          check_avg(t, op, "all_reduce");
        },
        [&] { return bytes_of(t); });
    store_into(t, reduce_block(all, t, 0, t.numel(), op));
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int src) override {
    auto all = rounds_.run(
        "broadcast", broadcast_label(t, src),
        [&] {
          check_tensor(t, -1, "broadcast");
          check_src(src, world_size_);
        },
        [&] { return rank_ == src ? bytes_of(t) : std::string(); });
    if (rank_ != src) {
      check_size(all[src].value, (size_t)t.numel() * t.itemsize());
      if (t.numel()) std::memcpy(t.data_ptr(), all[src].value.data(), all[src].value.size());
      t.bump_version();
    }
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& t) override {
    auto all = rounds_.run(
        "all_gather", all_gather_label(t),
        [&] { check_blocks(out, t, true, world_size_, -1, "all_gather"); },
        [&] { return bytes_of(t); });
    char* dst = static_cast<char*>(out.data_ptr());
    for (const Store::Part& p : all) {
      check_size(p.value, (size_t)t.numel() * t.itemsize());
      std::memcpy(dst, p.value.data(), p.value.size());
      dst += p.value.size();
    }
    out.bump_version();
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    auto all = rounds_.run(
        "reduce_scatter", reduce_scatter_label(out, op),
        [&] {
          check_blocks(out, in, false, world_size_, -1, "reduce_scatter");
          check_avg(out, op, "reduce_scatter");
        },
        [&] { return bytes_of(in); });
    store_into(out, reduce_block(all, out, rank_ * out.numel(), out.numel(), op));
    return std::make_unique<DoneWork>();
  }
  void barrier() override { rounds_.run("barrier", "barrier()", nullptr, nullptr); }
  std::vector<std::string> all_gather_bytes(const std::string& mine) override {
    return rounds_.all_gather_bytes(mine);
  }
  void shutdown() override { rounds_.shutdown(); }

 private:
  // The reduction over ranks (in rank order, so every rank gets the same bits) of elements
  // [begin, begin + n) of each rank's buffer.
  Tensor reduce_block(const std::vector<Store::Part>& all, const Tensor& like, int64_t begin,
                      int64_t n, ReduceOp op) {
    size_t isz = like.itemsize();
    Tensor acc;
    for (const Store::Part& p : all) {
      TC_CHECK(p.value.size() >= (size_t)(begin + n) * isz, ValueError,
               "tc.distributed: internal error: a rank's buffer is shorter than the ranks agreed");
      Tensor x = tensor_of(p.value.substr((size_t)begin * isz, (size_t)n * isz), like, n);
      acc = acc.defined() ? combine(acc, x, op) : x;
    }
    if (op == ReduceOp::Avg)
      acc = call1(Op::div, {acc, Tensor::scalar((double)world_size_, DType::Float64, true)});
    return acc;
  }

  Rounds rounds_;
};

#ifdef TC_HAVE_CUDA
// ---- "nccl": each collective checked through the store, then NCCL's -----------------------------
class CheckedGroup final : public ProcessGroup {
 public:
  // gpu: the rank's GPU, as make_nccl_group chose it (LOCAL_RANK's, else the rank's)
  CheckedGroup(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<Store> store, int gpu,
               bool check)
      : ProcessGroup(inner->rank(), inner->world_size()),
        inner_(std::move(inner)),
        rounds_(std::move(store), rank_, world_size_),
        gpu_(gpu),
        check_(check) {}
  std::string backend() const override { return inner_->backend(); }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    if (check_)
      rounds_.run(
          "all_reduce", all_reduce_label(t, op),
          [&] {
            check_tensor(t, gpu_, "all_reduce");
            check_avg(t, op, "all_reduce");
          },
          nullptr);
    return inner_->all_reduce(t, op);
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int src) override {
    if (check_)
      rounds_.run(
          "broadcast", broadcast_label(t, src),
          [&] {
            check_tensor(t, gpu_, "broadcast");
            check_src(src, world_size_);
          },
          nullptr);
    return inner_->broadcast(t, src);
  }
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& t) override {
    if (check_)
      rounds_.run(
          "all_gather", all_gather_label(t),
          [&] { check_blocks(out, t, true, world_size_, gpu_, "all_gather"); }, nullptr);
    return inner_->all_gather(out, t);
  }
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    if (check_)
      rounds_.run(
          "reduce_scatter", reduce_scatter_label(out, op),
          [&] {
            check_blocks(out, in, false, world_size_, gpu_, "reduce_scatter");
            check_avg(out, op, "reduce_scatter");
          },
          nullptr);
    return inner_->reduce_scatter(out, in, op);
  }
  void barrier() override {
    if (check_) rounds_.run("barrier", "barrier()", nullptr, nullptr);
    inner_->barrier();
  }
  std::vector<std::string> all_gather_bytes(const std::string& mine) override {
    return rounds_.all_gather_bytes(mine);
  }
  void shutdown() override {
    inner_->shutdown();
    rounds_.shutdown();
  }

 private:
  std::shared_ptr<ProcessGroup> inner_;
  Rounds rounds_;
  int gpu_;
  bool check_;
};
#endif

}  // namespace

std::vector<std::string> ProcessGroup::all_gather_bytes(const std::string&) {
  TC_FAIL(NotImplementedError, "tc.distributed: this process group cannot gather host-side bytes");
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  if (name == "product") return ReduceOp::Product;
  TC_FAIL(ValueError, "tc.distributed: unknown reduce op '%s' (sum, avg, max, min, product)",
          name.c_str());
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(const std::string& backend,
                                                   std::shared_ptr<Store> store, int rank,
                                                   int world_size, double timeout_s, bool check) {
  TC_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ValueError,
           "tc.distributed.init_process_group: rank %d is not in [0, world_size=%d)", rank,
           world_size);
  if (backend == "gloo") return std::make_shared<StoreGroup>(std::move(store), rank, world_size);
  if (backend == "nccl") {
#ifdef TC_HAVE_CUDA
    auto inner = make_nccl_group(store, rank, world_size, timeout_s);
    const char* local = std::getenv("LOCAL_RANK");
    int gpu = local ? std::atoi(local) : rank;
    return std::make_shared<CheckedGroup>(std::move(inner), std::move(store), gpu, check);
#else
    (void)timeout_s;
    (void)check;
    TC_FAIL(
        DeviceError,
        "tc.distributed: backend \"nccl\" needs CUDA, and tc was built without the CUDA toolkit");
#endif
  }
  TC_FAIL(ValueError, "tc.distributed.init_process_group: unknown backend '%s' (nccl, gloo)",
          backend.c_str());
}

}  // namespace tc::dist
