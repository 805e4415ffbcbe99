-- A small CNN's training step on the CPU (train.lua's cnn: conv-bn-relu-pool x2, linear; batch 64
-- of 1x16x16; SGD with momentum), tc eager against tc.compile of the whole step (the forward and
-- its compiled backward; backward() and the optimizer step are graph breaks) and of the model
-- only. Prints "key value" lines: ms per step (best of `rounds` rounds of `steps` steps), the
-- compiled step's first call (trace, replay, compile) and its counters.
--   ./build/tcrun bench/train_step_cpu.lua [backend=tc] [steps=10] [rounds=5]
package.path = "bench/?.lua;" .. package.path
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"
local common = require "bench_common"

local opt = {backend = "tc", steps = 10, rounds = 5}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  opt[k] = tonumber(v) or v
end

-- what: nil (eager), "model" (the model compiled) or "step" (the whole step compiled)
local function setup(what)
  tc.manual_seed(0)
  local model = nn.Sequential(
    nn.Conv2d(1, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, {padding = 1}), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(16, 3))
  local o = optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
  local forward = what == "model" and tc.compile(model, {backend = opt.backend}) or model
  local function step(xb, yb)
    o:zero_grad()
    local loss = F.cross_entropy(forward(xb), yb)
    loss:backward()
    o:step()
    return loss
  end
  return what == "step" and tc.compile(step, {backend = opt.backend}) or step
end

local x, y = tc.randn(64, 1, 16, 16), tc.randint(1, 4, {64})
local function best_ms(step)
  local best = math.huge
  for _ = 1, opt.rounds do
    local t0 = tc.utils.perf_counter()
    for _ = 1, opt.steps do step(x, y) end
    best = math.min(best, (tc.utils.perf_counter() - t0) * 1e3 / opt.steps)
  end
  return best
end

local eager = setup()
eager(x, y)
common.say("eager_step_ms", best_ms(eager))

for _, what in ipairs {"step", "model"} do
  tc.compiler.reset()
  local step = setup(what)
  local t0 = tc.utils.perf_counter()
  step(x, y)
  local first = (tc.utils.perf_counter() - t0) * 1e3
  common.say("compiled_" .. what .. "_step_ms", best_ms(step))
  if what == "step" then
    local s = tc.compiler.stats()
    common.report_compile("compiled_step", first, s)
    common.say("compiled_step_backward_compiles", s.backward_compiles)
    common.say("compiled_step_graph_breaks", s.graph_breaks)
  end
end
