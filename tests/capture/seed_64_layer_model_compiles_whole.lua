-- The seed model (linear + 64 Layers of linear, relu, sigmoid, linear, relu) compiled whole:
-- one graph, no break, every parameter a graph input behind a guard, equal to eager.
local tc = require "tc"
local seed = require "seed_layers"
local h = require "helpers"

local model = seed.Model()
local x = tc.randn(10, 10)
local cm = tc.compile(model)
h.close(cm(x), model(x), "whole model")
h.close(cm(x), model(x), "second call")
local s = h.stats()
h.eq(s.traces, 1, "traces")
h.eq(s.graph_breaks, 0, "breaks")
h.eq(s.backend_compiles, 1, "backend compiles")
local report = tc.compiler.explain(model)(x)
h.eq(report.graph_count, 1)
h.eq(report.op_count, 1 + 64 * 5, "ops")
local guards = table.concat(report.guards[1].guards, "\n")
-- the listing folds the 64 layers' identical guards into one line each, with no raw addresses
h.eq(h.count(guards, "TENSOR_MATCH"), 1 + 2 + 4, "tensor guards: the input, the first linear, 4 per layer")
local on = " on " .. tc.get_default_device()  -- cpu, or cuda:0 under tcrun --device=cuda
assert(guards:find("TENSOR_MATCH: m.layers[1..64].linear2.bias float32[10]" .. on .. ", requires_grad (x64)", 1, true), guards)
assert(guards:find("ID_MATCH: getmetatable(m.layers[1..64]) the same class Layer (x64)", 1, true), guards)
assert(not guards:find("0x%x%x%x%x"), "no raw addresses:\n" .. guards)
h.eq(#report.guards[1].guards < 80, true, "a readable listing (" .. #report.guards[1].guards .. " lines)")
