// The JSON form of a lowered graph: kernels with their loop IR, buffers, symbols, steps, outputs
// and the static arena. aot packages store it in their plan (aot/plan.h); the CPU backend's disk
// cache stores it next to the object code so a warm start skips lowering (cpu/plan_cache.h).
//
//   nlohmann::json j = lowered_to_json(lg, nullptr);
//   LoweredGraph back;
//   lowered_from_json(j, &back, nullptr);   // json exceptions or tc::Error on a malformed document
#pragma once
#include <functional>
#include <nlohmann/json.hpp>

#include "loop_ir.h"

namespace tc::lower {

// The library calls a backend puts into graphs as External steps (the CUDA backend's cuBLASLt
// epilogues), by name: the document stores the name and its reader gets the call back. Null (or
// a null result): none.
using LibraryCalls = std::function<std::shared_ptr<const capture::ExternalFn>(const std::string& name)>;

// Throws NotImplementedError for what cannot be stored: External steps that are not `calls`
// (functions kept in the graph with allow_in_graph) and large tensor constants.
nlohmann::json lowered_to_json(const LoweredGraph& g, const LibraryCalls& calls);
// Index checks come back as ones raising IndexError without a graph node (the document keeps
// no graph). Throws tc::Error (ValueError) or nlohmann::json::exception on a malformed document.
void lowered_from_json(const nlohmann::json& j, LoweredGraph* g, const LibraryCalls& calls);

DType dtype_from_json(const nlohmann::json& j);
// A graph constant (numbers, lists, strings, dtypes, small CPU tensors with their data);
// NotImplementedError for what cannot be stored.
nlohmann::json value_to_json(const Value& v);  // a dtype name; ValueError for an unknown one

}  // namespace tc::lower
