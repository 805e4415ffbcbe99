// Lowering: a captured graph to the loop IR (loop_ir.h) that the code generators consume.
//
//   LoweredGraph lg = tc::lower::lower(graph, {});
//   std::vector<Tensor> outs = tc::lower::run(lg, inputs);   // the loop-IR interpreter (oracle)
//
// The pipeline (lower.cpp, one pass per file, a dump after each under TC_DEBUG=2): decompose
// composite ops (decompose.cpp), symbolic sizes (sym_shapes.cpp), index arithmetic, scalar code
// and fusion into kernels and externs (schedule.cpp), structural dedup (dedup.cpp), static
// memory plan (plan_memory.cpp). A graph lowering cannot handle raises tc::Error
// (NotImplementedError) naming the op; callers then run that graph on the eager backend.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "loop_ir.h"
#include "tc/capture/graph.h"

namespace tc::lower {

struct LowerOptions {
  bool dump = false;        // print every stage to stderr (also when TC_DEBUG >= 2)
  int tiny_matmul = 16;     // matmuls with every dim <= this become generated reductions
  int realize_cost = 30;    // a value read by several consumers is stored once its
                            // recomputation costs more instructions than this
  // Functions kept in the graph (allow_in_graph) become Externs with `external` set; a runner
  // that cannot call them leaves this off and such graphs are refused (NotImplementedError).
  bool externals = false;
  // External nodes that the runner added itself as library calls (the CUDA backend's fused
  // cuBLASLt products, backends/cuda/cuda_fuse.h): Externs without `externals`, not fallbacks.
  bool library_externals = false;
  // The runner checks index values inside its kernels (ScalarOp::flag_if, LoweredGraph::
  // index_checks): index_select, gather, embedding and the class targets of nll_loss and
  // cross_entropy are generated with such checks instead of a host check step or an extern.
  bool device_checks = false;
  int realize_loads = 2;    // ... or reads more buffers than this (norm internals excepted)
  // The device the graph's tensors are on (the runner's): tensors elsewhere are refused.
  DeviceType device = DeviceType::CPU;
  // Channels-last layout (the CUDA backend's, backends/cuda/cuda_layout.h): for an extern node
  // (a convolution, a library call) and whether a tensor it reads is channels-last, the runner's
  // call that writes its 4-D result channels-last (NHWC: logical [N, C, H, W], strides
  // [H*W*C, 1, W*C, C]) instead, or null to keep the node's own call. Values computed from
  // channels-last buffers (batch_norm, relu, residual adds, pools) are then stored channels-last
  // too, by kernels iterating in that memory order (N, H, W, C), so the layout stays NHWC from one
  // convolution to the next; graph outputs stay contiguous.
  std::function<std::shared_ptr<const capture::ExternalFn>(const capture::Node&,
                                                           bool reads_channels_last)>
      channels_last_call;
};

LoweredGraph lower(const capture::Graph& g, const LowerOptions& o = {});

// Runs a lowered graph on CPU tensors (inputs in graph input order), kernel by kernel, slowly:
// the reference every code generator is tested against. Externs run through tc::call.
std::vector<Tensor> run(const LoweredGraph& g, const std::vector<Tensor>& inputs);

// Counts for tests and explain.
int count_launches(const LoweredGraph& g);
int count_externs(const LoweredGraph& g, bool fallbacks_only);
std::vector<std::string> fallback_ops(const LoweredGraph& g);

}  // namespace tc::lower
