-- A Lua function as backend: it gets gm (print_tabular, nodes, forward) and the example inputs,
-- once per graph, and the callable it returns runs the graph from then on.
local tc = require "tc"
local h = require "helpers"

local calls, runs = 0, 0
local function backend(gm, example_inputs)
  calls = calls + 1
  h.eq(#example_inputs, 2, "example inputs")
  local nodes = gm.nodes
  h.eq(nodes[1].op, "placeholder")
  h.eq(nodes[3].target, "add")
  h.eq(nodes[#nodes].op, "output")
  assert(gm.code:find("relu", 1, true), gm.code)
  return function(...)
    runs = runs + 1
    return gm:forward(...)
  end
end
local function f(x, y) return (x + y):relu() end
local cf = tc.compile(f, {backend = backend})
local x, y = tc.randn(3, 3), tc.randn(3, 3)
h.close(cf(x, y), f(x, y))
h.close(cf(x, y), f(x, y))
h.eq(calls, 1, "backend compiles")
h.eq(runs, 2, "callable runs")

local out = h.run([[
local tc = require "tc"
local f = tc.compile(function(x) return x:sin() + 1 end, {backend = function(gm, ex) gm:print_tabular(); return gm.forward end})
f(tc.ones(2))
]])
assert(out:find("placeholder", 1, true) and out:find("call_function  sin", 1, true), out)

-- many inputs (the seed model's 259 tensors), and an unspecialized number among the inputs
package.path = "scripts/models/?.lua;" .. package.path
local seed = require "seed_layers"
local model = seed.Model()
local got
local cm = tc.compile(model, {backend = function(gm, ex)
  got = #ex
  return function(...) return gm:forward(...) end
end})
local xm = tc.randn(10, 10)
h.close(cm(xm), model(xm), "259 inputs")
h.eq(got, 259, "example inputs")
local scaled = tc.compile(function(x, k) return x * k end,
                          {backend = function(gm) return function(...) return gm:forward(...) end end})
for k = 1, 4 do h.close(scaled(x, k), x * k, "number input " .. k) end
