// Compiling a graph by partitions: the runs a backend supports go to it, the rest to eager, and
// the pieces run in order as one CompiledGraph (internal to backends; compile_graph uses it).
#pragma once
#include "tc/backends.h"

namespace tc::backends {

// `b` compiles the whole graph when it supports every op node; otherwise the graph is cut by
// lower::partition, unsupported runs are compiled by `fallback` (eager), and the report counts
// their nodes (fallback_nodes) with one perf hint per node. The reports of all pieces are summed.
Compiled compile_partitioned(const Backend& b, const Backend& fallback, const capture::Graph& g,
                             const CompileOptions& o);

}  // namespace tc::backends
