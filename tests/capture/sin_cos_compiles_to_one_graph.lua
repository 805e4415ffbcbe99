-- foo(x, y) = sin(x) + cos(y): compiled as a function and through a wrapper, one graph, equal to
-- eager; the second call is a cache hit (no new trace).
local tc = require "tc"
local h = require "helpers"

local function foo(x, y)
  local a = tc.sin(x)
  local b = tc.cos(y)
  return a + b
end
local cf = tc.compile(foo)
local x, y = tc.randn(10, 10), tc.randn(10, 10)
h.close(cf(x, y), foo(x, y), "compiled foo")
h.close(cf(x, y), foo(x, y), "second call")
local s = h.stats()
h.eq(s.traces, 1, "traces")
h.eq(s.cache_hits, 1, "cache hits")
h.eq(s.graph_breaks, 0, "graph breaks")

-- as a wrapper: a compiled function calling foo (inlined into the same single graph)
local wrapped = tc.compile(function(a, b) return foo(a, b) * 2 end)
h.close(wrapped(x, y), foo(x, y) * 2, "wrapper")
local report = tc.compiler.explain(function(a, b) return foo(a, b) end)(x, y)
h.eq(report.graph_count, 1, "graph count")
h.eq(report.op_count, 3, "op count")
h.eq(table.concat(report.ops_per_graph[1], ","), "sin,cos,add", "ops")
