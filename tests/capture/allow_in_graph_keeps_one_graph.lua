-- tc.compiler.allow_in_graph(fn, meta_fn): a host function called between tensor ops becomes one
-- node of the graph. While tracing, meta_fn runs on fake tensors and gives the outputs'
-- metadata (fake tensors, or {shape=, dtype=} tables); when the graph runs, the real function
-- runs on the real tensors. 1 graph, 0 breaks, results equal eager. The same code calling an
-- unregistered (here: disabled) function breaks the graph: 2 graphs, 1 break.
local tc = require "tc"
local h = require "helpers"

local calls, meta_calls = 0, 0
local function make_host()
  return function(x, k)
    calls = calls + 1
    return (x * k):tanh(), x:sum(1)
  end
end
local allowed = tc.compiler.allow_in_graph(make_host(), function(x, k)
  meta_calls = meta_calls + 1
  assert(tc.is_tensor(x) and x.shape[1] == 4, "the meta function receives fake tensors")
  return x * k, x:sum(1)
end)
local plain = tc.compiler.disable(make_host())

local function f_with(host)
  return function(x)
    local y = x:relu() + 1
    local a, s = host(y, 3)
    return a:sigmoid() * 2, s + 1
  end
end

-- registered: one graph, the host function runs once per call with real tensors
local f = f_with(allowed)
local cf = tc.compile(f)
for i = 1, 3 do
  local x = tc.randn(4, 5)
  local a1, s1 = cf(x)
  local a2, s2 = f(x)
  h.close(a1, a2, "first result, call " .. i)
  h.close(s1, s2, "second result, call " .. i)
end
h.eq(calls, 6, "the host function ran once per compiled and once per eager call")
h.eq(meta_calls, 1, "the meta function ran once, while tracing")
local x = tc.randn(4, 5)
local report = tc.compiler.explain(f)(x)
h.eq(report.graph_count, 1, "graphs with allow_in_graph")
h.eq(report.graph_break_count, 0, "breaks with allow_in_graph")

-- not registered: the same code breaks the graph at the call
local g = f_with(plain)
local cg = tc.compile(g)
for i = 1, 2 do
  local x2 = tc.randn(4, 5)
  local a1, s1 = cg(x2)
  local a2, s2 = g(x2)
  h.close(a1, a2, "unregistered, first result")
  h.close(s1, s2, "unregistered, second result")
end
report = tc.compiler.explain(g)(x)
h.eq(report.graph_count, 2, "graphs without allow_in_graph")
h.eq(report.graph_break_count, 1, "breaks without allow_in_graph")

-- the graph lists the call; a meta function may describe outputs as {shape=, dtype=} tables
local row_sums = tc.compiler.allow_in_graph(function(x) return x:sum(2):double() end,
  function(x) return {shape = {x.shape[1]}, dtype = tc.float64} end)
local listing
local function k(x) return row_sums(x * 2) + 1 end
local ck = tc.compile(k, {backend = function(gm) listing = gm.code; return function(...) return gm:forward(...) end end})
local y = tc.randn(3, 6)
local out = ck(y)
h.eq(out.dtype, tc.float64, "dtype from the meta table")
h.close(out, k(y), "table meta result")
assert(listing and listing:find("external", 1, true), listing)

-- a result that contradicts the meta function is an error, not a silent wrong graph
local liar = tc.compiler.allow_in_graph(function(x) return x:int() end, function(x) return x end)
local cl = tc.compile(function(x) return liar(x + 1) * 2 end)
local ok, err = pcall(cl, tc.randn(2, 2))
assert(not ok and tostring(err.message or err):find("meta function said", 1, true), tostring(err.message or err))
