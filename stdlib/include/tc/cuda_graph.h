// CUDA graphs: the GPU work that a function queues, recorded once and replayed with one launch
// (what tc.compile's mode = "reduce-overhead" uses; backends/cuda/cuda_graphs.h). Memory that the
// recorded work allocates comes from the graph's private pool and stays the graph's: every
// replay writes the same addresses.
//
//   tc::cuda::CudaGraph g;
//   tc::Tensor out;
//   std::string why;
//   if (g.capture(0, [&] { out = tc::call1(tc::Op::relu, {x}); }, &why)) {
//     g.replay();  // recomputes out from x's current contents, on the current stream
//   } else {
//     printf("not capturable: %s\n", why.c_str());  // e.g. the function read a value on the host
//   }
//
// Memory of the graph's pool may be handed to callers without a copy (hand_out, below): a replay
// first moves whatever of it is still referenced out of the pool, so no tensor ever sees a later
// replay overwrite its values.
//
// Capture records nothing that waits for the device: a synchronization or a copy between host
// and device inside the function abandons the capture (capture() returns false, naming it)
// instead of recording a graph that would be wrong. Checks of values on the device (index
// ranges) are left to the replays: see device_error() and check_later().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tc {
class Storage;
}

namespace tc::cuda {

struct GraphPool;

// Raises the op's error for what its kernels flagged in the device error word (code, detail);
// returns for a flag that is not its check's (a graph's checks share the word).
using DeviceCheckDecoder = std::function<void(int64_t code, int64_t detail)>;

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // waits for the device, then frees the graph and its pool (blocks still held by
                 // tensors go back to the driver when those are freed)
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records the work `fn` queues on the calling thread's current stream of `device` (its kernels
  // do not run). True: the graph is ready to replay. False: capture was abandoned (`why` says
  // what in fn could not be recorded, or the driver's refusal); nothing of fn ran on the device,
  // and memory fn allocated is freed with this object. Errors of fn other than such breaks are
  // rethrown after the capture is cleaned up. A CudaGraph captures once.
  bool capture(int device, const std::function<void()>& fn, std::string* why);
  // Launches the graph on the current stream of its device (ordered after earlier work there),
  // after move_out().
  void replay();
  // A storage over `nbytes` bytes of `s` from byte `offset` (memory the recorded work allocated:
  // the graph's outputs) for a caller to keep: it keeps `s` alive, and the next replay moves it
  // out of the pool if it is still referenced then. The same arguments before the next replay
  // return the same storage.
  std::shared_ptr<Storage> hand_out(const std::shared_ptr<Storage>& s, size_t offset, size_t nbytes);
  // Moves the storages handed out since the last replay that are still referenced out of the
  // pool now: new memory, one copy kernel on the stream, Storage::swap_memory. When they hold
  // 64 MiB or more, or are 32 storages or more, the memory-pressure hook runs first (a Lua
  // collection: a result dropped in Lua is referenced until the collector frees it), which costs
  // less than copying them; after a collection that freed none of them, the next 1, 2, 4 ... 64
  // replays of this graph move without collecting (a caller that keeps its results).
  void move_out();
  bool ready() const { return exec_ != nullptr; }
  // Recorded ops check values on the device (index ranges, integer division by zero): they flag
  // the device error word instead of raising. After a replay, device_error() waits for the
  // device and reads (and clears) the word: true if a check failed; the caller then runs the
  // work plainly to raise the op's own error. Always false for graphs without such checks.
  bool device_checks() const { return device_checks_; }
  bool device_error() const;
  // The recorded checks' decoder when every check left one (flags read after the fact can then
  // be told apart: backends/cuda/README.md), else empty. Such a graph's replays need not wait:
  // check_later.
  const DeviceCheckDecoder& decoder() const { return decoder_; }
  // After replay() of a graph with a decoder: a snapshot of the device error word is queued on
  // the stream (a copy into pinned host memory, an event), and the host goes on without waiting.
  // The snapshot is read where the host meets the device next (raise_replay_errors in the
  // runtime: the next reduce-overhead call, synchronize(), a copy to the host, an eager op's own
  // check); if this replay flagged, `raise` gets the word (and raises the op's error), the word
  // is cleared and the snapshots queued after it are dropped.
  void check_later(DeviceCheckDecoder raise);
  int64_t nodes() const { return nodes_; }  // kernels, copies and memsets recorded

 private:
  int device_ = -1;
  void* graph_ = nullptr;  // CUgraph
  void* exec_ = nullptr;   // CUgraphExec
  GraphPool* pool_ = nullptr;
  int64_t nodes_ = 0;
  bool device_checks_ = false;
  DeviceCheckDecoder decoder_;
  struct Handed {
    const Storage* from;        // the pool's storage
    size_t offset, nbytes;      // the bytes of it handed out
    std::weak_ptr<Storage> to;  // the storage over them
  };
  std::vector<Handed> handed_;  // since the last replay
  int collect_backoff_ = 0;     // replays to skip after a collection that freed none (0, 1, 2 ... 64)
  int collect_skip_ = 0;        // of those, still to skip
};

// Process-wide counts, for tests and reports.
struct CudaGraphStats {
  int64_t captures = 0;   // graphs recorded
  int64_t abandoned = 0;  // captures given up (something in them cannot be recorded)
  int64_t replays = 0;
  int64_t outputs_handed = 0;  // storages handed out over a pool's memory (hand_out)
  int64_t outputs_moved = 0;   // of those, moved out of the pool by a later replay (still referenced)
  int64_t collections = 0;     // full collections a replay ran before moving (CudaGraph::move_out)
  int64_t bytes_moved = 0;
  int64_t inputs_copied = 0;  // copies of inputs into a graph's static buffers before replays
  int64_t bytes_copied = 0;   // (made and counted by backends/cuda/cuda_graphs.cpp: count_input_copy)
  int64_t checks_later = 0;   // replays whose device checks are read later, without waiting (check_later)
  int64_t check_waits = 0;    // replays whose device checks waited for the device (device_error, or
                              // a full queue of later checks)
};
CudaGraphStats cuda_graph_stats();

// The checks of replays read later (CudaGraph::check_later) on `device`: in replay order, each
// whose snapshot of the error word is ready (all, waiting for them, when `wait`) is looked at;
// the first that flagged clears the word, drops the others and raises its op's error. Called
// where the host meets the device: each reduce-overhead call, synchronize(), copies to the host,
// eager ops' own device checks.
void raise_replay_errors(int device, bool wait);

// Copies of dense byte ranges on one device's current stream, up to 16 per launch of one kernel
// (a graph's inputs into its static buffers: hundreds of small tensors, such as the gradients an
// optimizer step reads, cost one launch per 16 instead of one each), counted in the stats'
// inputs_copied and bytes_copied.
struct InputCopy {
  const void* src;
  void* dst;
  size_t nbytes;
};
void copy_inputs(int device, const std::vector<InputCopy>& copies);
void count_input_copy(int64_t bytes);  // an input copied otherwise (Tensor::copy_from), for the stats

}  // namespace tc::cuda
