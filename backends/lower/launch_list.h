// What the compiled launch lists of the CPU and CUDA backends share (cpu/runtime.cpp,
// cuda/cuda_program.cpp): where each buffer of a lowered graph lives during one call, the extern
// steps (eager ops and library calls on views of the buffers) and the graph's outputs. Launching
// kernels is each backend's own.
//
//   std::vector<int64_t> syms = symbol_values(g, inputs);
//   std::shared_ptr<Storage> arena = <the backend's arena of arena_bytes(g, syms) bytes>;
//   std::vector<Place> places = place_buffers(g, inputs, arena, syms, device);
//   for each step: a Launch reads places[b].ptr; an Extern: run_extern(g, step.ext, places, syms, ...)
//   return graph_outputs(g, places, syms);
#pragma once
#include <memory>
#include <vector>

#include "loop_ir.h"

namespace tc::lower {

// Where a graph buffer lives during one call: a storage (held by the input, the arena or `own`,
// referred to, not copied: reference counts are atomic) and the element offset of its start.
struct Place {
  const std::shared_ptr<Storage>* storage = nullptr;
  std::shared_ptr<Storage> own;  // an unplanned buffer's, or an extern result that took its place
  int64_t offset = 0;            // elements
  char* ptr = nullptr;
};

// The graph's dynamic sizes, from the inputs' dims.
std::vector<int64_t> symbol_values(const LoweredGraph& g, capture::GraphInputs inputs);
// Whether the dims that share a symbol (LoweredGraph::tied) are equal in `inputs`: the generated
// code holds only then (the backends run a call where they are not on eager).
bool ties_hold(const LoweredGraph& g, capture::GraphInputs inputs);
// The arena the memory plan needs for these sizes.
int64_t arena_bytes(const LoweredGraph& g, const std::vector<int64_t>& syms);
// Inputs where they are, planned buffers in `arena` (which must outlive the places), unplanned
// ones in storages of their own on `device`.
std::vector<Place> place_buffers(const LoweredGraph& g, capture::GraphInputs inputs,
                                 const std::shared_ptr<Storage>& arena, const std::vector<int64_t>& syms,
                                 Device device);
Tensor view_of(const Place& p, DType dtype, const BufferView& v, const std::vector<int64_t>& syms);

// Runs extern step `e` on views of its buffers and writes its results into its output buffers.
// `rebind`: a fresh result covering a whole Temp or Output buffer replaces that buffer instead of
// being copied (later steps read it where it is). An op's error is a capture::NodeError of the
// step's node (capture names the user's line); `backend` names the backend in tc's own errors.
void run_extern(const LoweredGraph& g, const Extern& e, std::vector<Place>& places, const std::vector<int64_t>& syms,
                const char* backend, bool rebind);

std::vector<Tensor> graph_outputs(const LoweredGraph& g, const std::vector<Place>& places,
                                  const std::vector<int64_t>& syms);

}  // namespace tc::lower
