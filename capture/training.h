// Compiled training (AOTAutograd's job): an entry whose graph has inputs that require grad, traced
// with grad mode on, is a training entry. At its first call a joint forward+backward is built
// from the graph and the call's real inputs (training.cpp), both halves are compiled with the
// entry's backend and options, and every call runs the compiled forward and links its outputs to
// one autograd node (CompiledFunctionBackward) whose backward runs the compiled backward graph.
#pragma once
#include <lua.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tc/capture/graph.h"

namespace tc::capture {

struct Entry;
struct CompileConfig;

// What a training entry runs (made at its first call).
struct Training;

// Whether a graph traced now makes a training entry: grad mode is on and an input requires grad.
bool is_training_graph(const Graph& g);

// Runs training entry e on its inputs (Graph::inputs order): the graph's outputs, those that
// require grad linked to the backward. `function` names the entry in logs and reports.
std::vector<Tensor> run_training(lua_State* L, const Entry& e, const std::string& function,
                                 const CompileConfig& cfg, GraphInputs inputs);

}  // namespace tc::capture
