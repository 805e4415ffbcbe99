// Compiled DDP (torch's DDPOptimizer): a training graph that uses parameters of a
// DistributedDataParallel module is split at gradient-bucket boundaries into consecutive
// subgraphs, each its own training entry (its own compiled forward and backward, its own
// CompiledFunctionBackward node). In the backward the last subgraph's node runs first and
// accumulates its parameters' gradients, which fires their post-accumulate-grad hooks, so DDP
// launches that bucket's all-reduce while the earlier subgraphs' backward still runs. One fused
// backward would make every gradient ready at once, at its end, with no overlap.
//
// DDP tells capture which tensors are its parameters and its bucket cap
// (tc.compiler._ddp_mark_parameters(params, cap_bytes), called at wrap time). The cut points are
// chosen by walking the graph's op nodes backwards (the order of the backward) and cutting
// where the parameters used so far fill a bucket (cap bytes), as DDPOptimizer; a cut never
// separates an in-place write from the value it writes into. A parameter (any input that requires
// grad) used by several subgraphs is an input of the first one only, which also returns a view
// of it for the later ones: their gradients for it flow back through the first one's node, so
// it is accumulated once per backward (its hooks fire once, as DDP's reducer expects), and it
// counts towards the first one's bucket.
#pragma once
#include <lua.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tc/capture/graph.h"

namespace tc::capture {

struct Entry;
struct CompileConfig;

// The split of a graph: the subgraph of each node (-1 for Input nodes), how many, and why (a
// sentence for explain and the aot_graphs log; empty when there are no DDP parameters).
struct DdpPlan {
  std::vector<int> piece;
  int pieces = 1;
  std::string why;
};

// The split of g whose inputs are `params_bytes[j]` bytes of DDP parameters (0: not one) for a
// bucket cap of `cap_bytes`; same[j]: the first input that is the same tensor as input j.
DdpPlan plan_ddp_split(const Graph& g, const std::vector<int64_t>& params_bytes, const std::vector<int>& same,
                       int64_t cap_bytes);

// What a split entry runs (made at its first call).
struct DdpSplit;

// Runs training entry e split at bucket boundaries when its graph uses DDP parameters (decided
// at its first call and kept in e.ddp_split): true with the graph's outputs in *out; false when e
// is not split (run_training runs it whole).
bool run_ddp_split(lua_State* L, const Entry& e, const std::string& function, const CompileConfig& cfg,
                   GraphInputs inputs, std::vector<Tensor>* out);

// tc.compiler._ddp_mark_parameters(params, cap_bytes): the tensors in list `params` are a DDP
// module's parameters with buckets of cap_bytes (registered by lua_api.cpp on tc.compiler).
int l_ddp_mark_parameters(lua_State* L);

}  // namespace tc::capture
