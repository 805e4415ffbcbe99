// JSON forms of what a package stores (docs/aot.md): the manifest, and the launch list with its
// memory plan (a lower::LoweredGraph: buffers, arena offsets, symbols, steps, outputs; kernels by
// index into the package's object code). Readers throw tc::Error (ValueError) on a malformed
// document, naming the field.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>

#include "lower/lowered_json.h"
#include "tc/aot.h"

namespace tc::aot {

nlohmann::json manifest_to_json(const Manifest& m);
Manifest manifest_from_json(const nlohmann::json& j);

// Per graph input: {"arg": i} (the i-th user input) or {"constant": k} (manifest constant k).
struct GraphInput {
  bool constant = false;
  int index = 0;
};

using lower::LibraryCalls;

// The plan: the lowered graph (kernels with their loop IR, from which the CUDA launch geometry is
// computed; their machine code is in the object / cubins) and the graph's inputs. `kernel_code`:
// per kernel, what the device's runtime needs to find and launch it (cpu: {"symbol"}; cuda:
// {"shapes", "names"}), stored as the kernel's "code"; `code`: what the device's runtime needs for
// the whole graph (cuda: the tiny graph's kernel; cpu: null), stored as the plan's "code".
// Throws NotImplementedError for steps a package cannot hold (External steps that are not
// `calls`: functions kept in the graph with allow_in_graph).
nlohmann::json plan_to_json(const lower::LoweredGraph& g, const std::vector<GraphInput>& inputs,
                            const std::vector<nlohmann::json>& kernel_code, const nlohmann::json& code,
                            const LibraryCalls& calls);
void plan_from_json(const nlohmann::json& j, lower::LoweredGraph* g, std::vector<GraphInput>* inputs,
                    std::vector<nlohmann::json>* kernel_code, nlohmann::json* code, const LibraryCalls& calls);

}  // namespace tc::aot
