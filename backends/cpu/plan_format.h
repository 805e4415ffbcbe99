// The plan cache's binary form of a lowered graph (plan_cache.h): fixed-width little-endian fields
// and length-prefixed arrays in the order of loop_ir.h's structs, so that a warm start reads a
// plan without building a JSON tree (the 64-layer seed model's plan: ~2 ms instead of 8-16).
// Enums are stored as their numbers: a plan is only trusted by the executable that wrote it (the
// key holds its build id), so they cannot change under it.
//
//   std::string bytes = encode_plan(lowered);       // throws NotImplementedError: Lua functions
//   lower::LoweredGraph g = decode_plan(bytes);     // throws ValueError: malformed or truncated
#pragma once
#include <string>

#include "lower/loop_ir.h"

namespace tc::backends::cpu {

// Kernels, buffers, symbols, steps, outputs, arena size, fused node count and perf hints. Throws
// tc::Error (NotImplementedError) for what a plan cannot hold: index checks, calls of functions
// kept in the graph, tensor constants that are large, not on the CPU, or lists of tensors.
std::string encode_plan(const lower::LoweredGraph& g);
// The graph encode_plan stored. Throws tc::Error (ValueError) when `bytes` ends early, has bytes
// left over, or launches a kernel or names an op this build lacks.
lower::LoweredGraph decode_plan(const std::string& bytes);

}  // namespace tc::backends::cpu
