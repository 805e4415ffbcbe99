-- tc.compile(model, {dynamic = true}) gives generated code, not an op-by-op run: parameters and
-- buffers stay static (torch's rule; they were dynamic too, and past 4 dynamic dims the lowering
-- refused the graph), and an input dim an op ties to a fixed size (a Linear's feature dim) is
-- specialized, so only the batch dim is dynamic. New batch sizes reuse the trace; a wrong feature
-- count misses the guard and raises as eager does.
local tc, nn = require "tc", require "tc.nn"
local h = require "helpers"

local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
local cm = tc.compile(m, {dynamic = true})
for _, n in ipairs {3, 5, 7} do
  local x = tc.randn(n, 4)
  h.close_to_eager(cm(x), m(x), "batch of " .. n)
end
local s = h.stats()
h.eq(s.traces, 1, "one trace for every batch size")
h.eq(s.fallback_nodes, 0, "nodes run on eager kernels")
h.eq(s.kernels > 0, true, "generated kernels")
local ok, err = pcall(cm, tc.randn(3, 5))
h.eq(ok, false, "a wrong feature count raises")
h.eq(err.kind, "ShapeError", tostring(err))

-- buffers too: a batch norm's running statistics in eval mode
tc.compiler.reset()
local bn = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU())
bn:eval()
local cbn = tc.compile(bn, {dynamic = true})
tc.no_grad(function()
  for _, n in ipairs {2, 6, 9} do
    local x = tc.randn(n, 4)
    h.close_to_eager(cbn(x), bn(x), "batch norm, batch of " .. n)
  end
end)
h.eq(h.stats().traces, 1, "batch norm: one trace")
h.eq(h.stats().recompiles, 0, "batch norm: no recompiles")
