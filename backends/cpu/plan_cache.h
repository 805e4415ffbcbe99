// Lowered graphs on disk, so that a warm start skips lowering: under the disk cache's "cpu-plan"
// kind (disk_cache.h, same format, validation and atomic writes), keyed by the captured graph's
// whole structure (nodes, constants, tensor metadata, dynamic dims, user lines; not chunk names,
// which lowering does not keep) and this build of tc. The kernels' object code stays in the
// object cache (compile.cpp), keyed by the kernels. An entry holds plan_format.h's binary form.
//
//   std::string key = plan_key(graph);                    // "" when the graph cannot be stored
//   if (std::optional<LoweredGraph> lg = read_plan(key)) ... else write_plan(key, lower(graph));
#pragma once
#include <optional>
#include <string>

#include "lower/loop_ir.h"
#include "tc/capture/graph.h"

namespace tc::backends::cpu {

// "" for graphs whose plan is not stored: External nodes (Lua functions kept in the graph) and
// large tensor constants.
std::string plan_key(const capture::Graph& g);
// The stored plan for `key`, or nothing (a missing entry; a corrupt or unreadable one is
// discarded with a log line). `rejected` is set when one was discarded.
std::optional<lower::LoweredGraph> read_plan(const std::string& key, bool* rejected);
// Stores `lg` unless it holds what a plan cannot (index checks, External steps).
void write_plan(const std::string& key, const lower::LoweredGraph& lg);

}  // namespace tc::backends::cpu
