// mode = "reduce-overhead": a compiled graph whose tensors are on one GPU runs as CUDA graphs,
// whatever backend compiled it (eager's op-by-op launches today, the CUDA code generator's
// launch list later). compile_graph (registry.cpp) wraps every compile of that mode:
//
//   Compiled c = compile_partitioned(backend, eager, g, o);
//   if (o.mode == "reduce-overhead") c = with_cuda_graphs(std::move(c), g, o);
//
// As torch's cudagraph trees, per input signature (sizes and strides: one per dynamic-shape
// size, at most o.cudagraph_max_sizes, tc.config.cudagraph_max_sizes): the first call runs plain
// (warm-up: kernels compiled, library handles and plans made), the second is recorded into a
// CUDA graph and every later call replays it. If an input the graph reads moved between the
// warm-up and the second call (the saved activations that a forward recorded since hands to its
// backward, now over the forward's pool), the second call is one more warm-up and the third is
// recorded. Inputs whose address was the same in the (last) warm-up and the recording call are
// read in place (parameters, buffers, such activations); the others are copied into
// static buffers before each replay, and those the graph writes (a Tensor! argument that is the
// input or a view of it) are copied back after it.
// Outputs live in the graph's pool, handed out without a copy (CudaGraph::hand_out): the next
// replay first moves those still referenced (kept by the caller, saved for a backward that has
// not run) into new memory under the same Storage, so no output is ever overwritten by a later
// call, and outputs dropped before it cost nothing (results under 1 MiB in all are copied out
// right after the replay instead: in Lua they are nearly always still referenced then). An output
// that is a view of an input is that view.
// A recording that meets something that cannot be recorded (a host read of device values, a
// synchronization) is abandoned: that graph then runs plain launches, with one warning. Host
// data that ops upload is recorded with its bytes (tc/cuda_graph.h). Ops whose checks run on the
// device (index ranges) set the device error word in a replay; the wrapper then reads it after
// each replay (one wait for the device per call, only for such graphs) and, if set, runs the call
// plainly so that the op raises its own error, as eager. CPU graphs, and graphs with random ops
// or calls of Lua functions (a perf hint says so), run unchanged.
#pragma once
#include <string>

#include "tc/backends.h"

namespace tc::backends {

// Whether the graph's tensors are on a GPU (every input and every op result on one CUDA
// device, at least one input).
bool on_one_gpu(const capture::Graph& g);
// For a GPU graph: empty if CUDA graphs may record it, else why not (random ops, Lua calls).
std::string cuda_graphs_refusal(const capture::Graph& g);
// `c` run through CUDA graphs when g is on one GPU and may be recorded; else `c` unchanged (a
// GPU graph that may not be recorded gets a perf hint saying why).
Compiled with_cuda_graphs(Compiled c, const capture::Graph& g, const CompileOptions& o);

}  // namespace tc::backends
