-- A module Linear(100, 10) + relu: tc.compile(module) gives one graph with the parameters as
-- graph inputs (guarded by metadata, not baked in), equal to eager.
local tc = require "tc"
local nn = require "tc.nn"
local h = require "helpers"

local Net = nn.Module:extend("Net")
function Net:__init() self.linear = nn.Linear(100, 10); self.relu = nn.ReLU() end
function Net:forward(x) return self.relu(self.linear(x)) end

local m = Net()
local cm = tc.compile(m)
local x = tc.randn(8, 100)
h.close(cm(x), m(x), "compiled module")
h.eq(h.stats().traces, 1, "traces")
-- parameters are inputs: changing a weight in place changes the compiled result, no retrace
tc.no_grad(function() m.linear.weight:mul_(2) end)
h.close(cm(x), m(x), "after changing the weight")
h.eq(h.stats().traces, 1, "no retrace after an in-place weight change")
-- a second instance of the class reuses the entry (tables guarded by structure, not identity)
local m2 = Net()
local cm2 = tc.compile(m2)
h.close(cm2(x), m2(x), "second instance")
h.eq(h.stats().traces, 1, "one trace serves both instances")

local report = tc.compiler.explain(m)(x)
h.eq(report.graph_count, 1)
h.eq(table.concat(report.ops_per_graph[1], ","), "linear,relu", "ops")
local guards = table.concat(report.guards[1].guards, "\n")
assert(guards:find("m.linear.weight float32[10, 100]", 1, true), guards)
