-- Assignment into a tensor (x[i] = v, x[{1, {2, 3}}] = v, x[mask] = v) is traced as the eager
-- __newindex does it: a chain of views, then copy_/fill_ (masks: masked_fill/where, then copy_),
-- all nodes of one graph. Writes into arguments, tensors read from tables and views taken before
-- the write are seen exactly as eager Lua sees them.
local tc = require "tc"
local h = require "helpers"

local function same(a, b, what) h.close(a, b, what, 0) end

-- Runs f eagerly and compiled (fullgraph: no break allowed) on twin copies of the arguments;
-- results and the arguments after the call must be equal.
local function check(name, f, make)
  local cf = tc.compile(f, {fullgraph = true})
  for call = 1, 2 do
    tc.manual_seed(call)
    local a = table.pack(make())
    tc.manual_seed(call)
    local b = table.pack(make())
    local r1 = table.pack(f(table.unpack(a, 1, a.n)))
    local r2 = table.pack(cf(table.unpack(b, 1, b.n)))
    h.eq(r2.n, r1.n, name .. ": result count")
    for i = 1, r1.n do same(r2[i], r1[i], name .. ": result " .. i) end
    for i = 1, a.n do
      if tc.is_tensor(a[i]) then same(b[i], a[i], name .. ": argument " .. i .. " after the call") end
      if type(a[i]) == "table" and tc.is_tensor(a[i].buf) then same(b[i].buf, a[i].buf, name .. ": arg.buf") end
    end
  end
end

tc.compiler.reset()
check("integer index into an argument", function(x) x[2] = 7 return x * 2 end, function() return tc.randn(3, 4) end)
check("range table, tensor value broadcast", function(x, v) x[{1, {2, 3}}] = v return x:sum() end,
  function() return tc.randn(3, 4), tc.tensor({10, 20}) end)
check("all-rows range, number", function(x) x[{{}, 1}] = -1 return x end, function() return tc.randn(3, 4) end)
check("step range", function(x) x[{{1, 4, 2}}] = 0 end, function() return tc.randn(5) end)
check("0-dim target", function(x) x[{2, 3}] = 4.5 return x[2] end, function() return tc.randn(3, 4) end)
check("mask with a number", function(x) x[x:lt(0)] = 0 return x + 1 end, function() return tc.randn(4, 4) end)
check("mask with a tensor", function(x, v) x[x:gt(0)] = v return x end, function() return tc.randn(2, 3), tc.randn(2, 3) end)
check("bool value", function(m) m[1] = true return m end, function() return tc.zeros(3, {dtype = tc.bool}) end)
check("fresh tensor", function(x)
  local y = tc.zeros(3, 4)
  y[1] = x[1]
  y[{3, {}}] = 2
  y[y:eq(0)] = -1
  return y
end, function() return tc.randn(3, 4) end)
check("tensor read from a table", function(m, x) m.buf[1] = x m.buf[{2, 2}] = 9 return m.buf:sum() end,
  function() return {buf = tc.zeros(2, 3)}, tc.randn(3) end)
check("view taken before the write sees it", function(x)
  local row = x[1]
  local before = row:clone()
  x[1] = 3
  return row, before, x:sum()
end, function() return tc.randn(2, 3) end)
check("write through a view of a view", function(x) local v = x:t() v[2] = 0 return x end, function() return tc.randn(3, 3) end)
check("writes in a loop", function(x) for i = 1, 3 do x[i] = x[i] * i end return x end, function() return tc.randn(3, 2) end)
check("index tables from outside", function(x, idx) x[idx] = 1 return x end,
  function() return tc.randn(3, 4), {2, {1, 2}} end)
check("float key", function(x) x[2.0] = 5 return x end, function() return tc.randn(3) end)
check("integer tensor read", function(x, i) return x[i] end, function() return tc.randn(5, 2), tc.tensor({{1, 3}, {5, 5}}) end)
h.eq(h.stats().graph_breaks, 0, "no breaks")

-- one graph: the writes are nodes
local report = tc.compiler.explain(function(x) local y = x:clone() y[1] = 0 y[y:gt(0)] = 1 return y end)(tc.randn(3, 3))
h.eq(report.graph_count, 1, "graphs")
h.eq(report.graph_break_count, 0, "breaks")
h.eq(table.concat(report.ops_per_graph[1], " "), "clone select fill_ gt masked_fill copy_", "ops")

-- a write into an argument is visible to the caller, on cache hits too
local cf = tc.compile(function(x, k) x[k] = x[k] + 1 end)
local x = tc.zeros(3)
for _ = 1, 3 do cf(x, 2) end
same(x, tc.tensor({0, 3, 0}), "three in-place increments")

-- assignment through an integer index tensor (the key, or one item of an index table) is traced as
-- eager does it: the gathered slices take the value, then scatter back along the dim
check("index tensor key", function(x, i) x[i] = 0 return x end, function() return tc.randn(3, 2), tc.tensor({1, 3}) end)
check("index tensor in a later dim, broadcast value", function(x, i, v) x[{{}, i}] = v return x * 2 end,
  function() return tc.randn(2, 3, 4), tc.tensor({3, 1}), tc.randn(4) end)
check("index tensor after a select and a range", function(x, i) x[{2, {1, 2}, i}] = 5 return x end,
  function() return tc.randn(3, 3, 4), tc.tensor({{4, 1}, {2, 2}}) end)
check("index tensor read in a later dim", function(x, i) return x[{{}, 2, i}], x[{i}] end,
  function() return tc.randn(3, 3, 4), tc.tensor({1, 3}) end)
h.eq(h.stats().graph_breaks, 0, "no breaks")
local r3 = tc.compiler.explain(function(x, i) local y = x:clone() y[{{}, i}] = 0 return y end)(tc.randn(2, 3), tc.tensor({2}))
h.eq(table.concat(r3.ops_per_graph[1], " "), "clone reshape index_select detach view fill_ reshape expand scatter copy_", "ops")
-- an index out of range: eager's error
local function by_index_tensor(x, i) x[i] = 0 return x end
local ok1, e1 = pcall(by_index_tensor, tc.randn(3), tc.tensor({4}))
local ok2, e2 = pcall(tc.compile(by_index_tensor), tc.randn(3), tc.tensor({4}))
h.eq(ok1, false, "eager raises")
h.eq(ok2, false, "compiled raises")
h.eq(tostring(e2), tostring(e1), "the same error")
tc.compiler.reset()  -- code caches are per function: the entry above would serve the next call
local r2 = tc.compiler.explain(function(x) local y = x:clone() y.requires_grad = true return y end)(tc.randn(2))
h.eq(r2.break_reasons[1].code, "TC0302", "metadata assignment breaks")
