-- bar(a, b) with `if b:sum() < 0 then b = b * -1 end`: 2 graphs and 1 break; both branches are
-- correct on later calls, and taking the other branch never re-traces the first graph.
local tc = require "tc"
local h = require "helpers"

local function bar(a, b)
  local x = a / (tc.abs(a) + 1)
  if b:sum() < 0 then
    b = b * -1
  end
  return x * b
end

local report, text = tc.compiler.explain(bar)(tc.randn(10), tc.randn(10):abs())
h.eq(report.graph_count, 2, "graph count")
h.eq(report.graph_break_count, 1, "break count")
h.eq(report.break_reasons[1].code, "TC0101", "break code")
h.eq(report.break_reasons[1].line, 8, "break line")
assert(text:find("if b:sum() < 0 then", 1, true), text)
h.eq(table.concat(report.ops_per_graph[1], ","), "abs,add,div,sum", "ops of graph 1")

local cf = tc.compile(bar)
local a = tc.randn(10)
local pos, neg = tc.randn(10):abs() + 0.1, -(tc.randn(10):abs() + 0.1)
h.close(cf(a, pos), bar(a, pos), "positive branch")
local after_first = h.stats().traces
h.close(cf(a, neg), bar(a, neg), "negative branch")
h.eq(h.stats().traces, after_first + 1, "the other branch traces only its resume function")
for _ = 1, 3 do
  h.close(cf(a, pos), bar(a, pos), "positive again")
  h.close(cf(a, neg), bar(a, neg), "negative again")
end
h.eq(h.stats().traces, after_first + 1, "no more traces")
h.eq(h.stats().graph_breaks, 1, "one break traced")
