-- Training with a learning-rate scheduler compiles once: the optimizer's lr is a graph input of
-- the traced step (tc.optim marks every group's lr with tc.compiler.mark_dynamic(group, "lr")),
-- so StepLR and CosineAnnealingLR changing it never recompile the step nor run it uncompiled.
-- K steps of the tutorial's train function with sched:step() after each equal eager's losses and
-- parameters, for SGD with momentum, Adam, AdamW, RMSprop and Adagrad, in both modes (on the GPU,
-- `tcrun --device=cuda tests/capture/run.lua lr_scheduler`: the lr, a 0-dim CPU input of a CUDA
-- graph, is copied to the device at each call, and reduce-overhead replays one recorded graph);
-- the only recompile is the second step's (the first makes the optimizer's state uncompiled).
local tc, nn, optim = require "tc", require "tc.nn", require "tc.optim"
local h = require "helpers"

local K = 12
local cases = {
  {"SGD", function(ps) return optim.SGD(ps, {lr = 0.1, momentum = 0.9, weight_decay = 0.01}) end, "StepLR"},
  {"Adam", function(ps) return optim.Adam(ps, {lr = 0.01}) end, "CosineAnnealingLR"},
  {"AdamW", function(ps) return optim.AdamW(ps, {lr = 0.01}) end, "StepLR"},
  {"RMSprop", function(ps) return optim.RMSprop(ps, {lr = 0.01, momentum = 0.5}) end, "CosineAnnealingLR"},
  {"Adagrad", function(ps) return optim.Adagrad(ps, {lr = 0.1, lr_decay = 0.01}) end, "CosineAnnealingLR"},
}
local schedulers = {
  StepLR = function(opt) return optim.lr_scheduler.StepLR(opt, 3, {gamma = 0.5}) end,
  CosineAnnealingLR = function(opt) return optim.lr_scheduler.CosineAnnealingLR(opt, 8, {eta_min = 0.001}) end,
}

local function run(case, mode)
  tc.manual_seed(0)
  local model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  local opt = case[2](model:parameters())
  local sched = schedulers[case[3]](opt)
  local x, y = tc.randn(5, 4), tc.randn(5, 2)
  local train = h.train_function(model, tc.mse_loss, opt)
  local step = mode and tc.compile(train, {mode = mode}) or train
  local losses, lrs, traces = {}, {}, {}
  for i = 1, K do
    losses[i] = step(x, y)
    sched:step()
    lrs[i] = opt.param_groups[1].lr
    traces[i] = h.stats().traces
  end
  return losses, model, lrs, traces, train, x, y
end

for _, case in ipairs(cases) do
  for _, mode in ipairs {"default", "reduce-overhead"} do
    tc.compiler.reset()
    local what = case[1] .. " with " .. case[3] .. ", " .. mode
    local want, eager_model, want_lrs = run(case, nil)
    local got, model, lrs, traces, train, x, y = run(case, mode)
    h.eq(lrs[K], want_lrs[K], what .. ": the scheduler's last lr")
    assert(lrs[K] ~= lrs[1], what .. ": the lr never changed")
    for i = 1, K do h.close_to_eager(got[i], want[i], what .. ": loss of step " .. i) end
    local pe, pc = eager_model:parameters(), model:parameters()
    for i = 1, #pe do h.close_to_eager(pc[i], pe[i], what .. ": parameter " .. i .. " after " .. K .. " steps") end
    local s = h.stats()
    h.eq(s.recompiles, 1, what .. ": recompiles (the second step's, once the state exists)")
    h.eq(traces[K], traces[2], what .. ": traces after the second step")
    h.eq(s.fallbacks, 0, what .. ": functions that gave up compiling")
    -- the optimizer's op runs inside a graph, with lr as an input, not as a constant
    local report = tc.compiler.explain(train)(x, y)
    local fused = "_fused_" .. case[1]:lower() .. "_"
    local found = false
    for _, g in ipairs(report.ops_per_graph) do for _, op in ipairs(g) do found = found or op == fused end end
    assert(found, what .. ": no " .. fused .. " in the graphs")
    local lines = {}
    for _, g in ipairs(report.guards) do for _, l in ipairs(g.guards) do lines[#lines + 1] = l end end
    local guards = table.concat(lines, "\n")
    assert(guards:find("%.lr"), what .. ": no guard on lr's type:\n" .. guards)
    for l in guards:gmatch("[^\n]+") do
      assert(not (l:find("%.lr%f[^%w_]") and l:find("EQUALS")), what .. ": lr is guarded by value: " .. l)
    end
  end
end

-- The user setting lr by hand (no scheduler) does not recompile either.
do
  tc.compiler.reset()
  local function go(compiled)
    tc.manual_seed(0)
    local model = nn.Linear(4, 2)
    local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
    local train = h.train_function(model, tc.mse_loss, opt)
    local step = compiled and tc.compile(train) or train
    local x, y = tc.randn(5, 4), tc.randn(5, 2)
    for i = 1, 8 do
      opt.param_groups[1].lr = 0.1 / i
      step(x, y)
    end
    return model
  end
  local want, got = go(false), go(true)
  h.close_to_eager(got.weight, want.weight, "lr set by hand: weight")
  h.close_to_eager(got.bias, want.bias, "lr set by hand: bias")
  h.eq(h.stats().recompiles, 1, "lr set by hand: recompiles")
end
