-- opt:step() inside a compiled function traces into a graph, as torch.compile compiles the
-- optimizer: p.grad are guarded inputs, the fused optimizer op writes parameters and state in
-- place, the step count is the bucket's tensor (incremented in the graph), so steps after the
-- first ones reuse the entry instead of recompiling. K steps of the tutorial's train function give
-- eager's parameters for every optimizer, in both modes (reduce-overhead: CUDA graphs on the GPU,
-- `tcrun --device=cuda tests/capture/run.lua compiled_optimizer`); the function breaks only at
-- loss:backward().
local tc, nn, optim = require "tc", require "tc.nn", require "tc.optim"
local h = require "helpers"

local K = 6
local optimizers = {
  SGD = function(ps) return optim.SGD(ps, {lr = 0.1, momentum = 0.9, weight_decay = 0.01}) end,
  Adam = function(ps) return optim.Adam(ps, {lr = 0.01}) end,
  AdamW = function(ps) return optim.AdamW(ps, {lr = 0.01, amsgrad = true}) end,
  RMSprop = function(ps) return optim.RMSprop(ps, {lr = 0.01, momentum = 0.5, centered = true}) end,
  Adagrad = function(ps) return optim.Adagrad(ps, {lr = 0.1, lr_decay = 0.01}) end,
}

local function run(name, mode)
  tc.manual_seed(0)
  local model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  local opt = optimizers[name](model:parameters())
  local x, y = tc.randn(5, 4), tc.randn(5, 2)
  local train = h.train_function(model, tc.mse_loss, opt)
  local step = mode and tc.compile(train, {mode = mode}) or train
  local losses, traces = {}, {}
  for i = 1, K do
    losses[i] = step(x, y)
    traces[i] = h.stats().traces
  end
  return losses, model, opt, traces, train, x, y
end

for _, case in ipairs {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adam reduce-overhead", "SGD reduce-overhead"} do
  tc.compiler.reset()
  local name, mode = case:match("^(%S+) ?(%S*)$")
  mode = mode ~= "" and mode or "default"
  local want, eager_model = run(name, nil)
  local got, model, opt, traces, train, x, y = run(name, mode)
  name = case
  for i = 1, K do h.close_to_eager(got[i], want[i], name .. ": loss of step " .. i) end
  local pe, pc = eager_model:parameters(), model:parameters()
  for i = 1, #pe do h.close_to_eager(pc[i], pe[i], name .. ": parameter " .. i .. " after " .. K .. " steps") end
  h.eq(traces[K], traces[3], name .. ": steps after the third trace nothing")
  h.eq(h.stats().training_eager, 0, name .. ": the step graph is no training graph")
  h.eq(opt.state[pc[1]].step, K, name .. ": step count")
  h.eq(tc.compiler.stats().graph_breaks > 0, true, name .. ": backward() breaks")
  -- where it breaks, and the optimizer's op inside a graph
  local report = tc.compiler.explain(train)(x, y)
  local lines, ops = {}, {}
  for i, b in ipairs(report.break_reasons) do lines[i] = b.code .. " " .. b.source_line:match("^%s*(.-)%s*$") end
  h.eq(table.concat(lines, "; "), "TC0204 loss:backward()", name .. ": break reasons")
  for _, g in ipairs(report.ops_per_graph) do for _, op in ipairs(g) do ops[op] = true end end
  local fused = "_fused_" .. name:match("^%S+"):lower() .. "_"
  assert(ops[fused], name .. ": no " .. fused .. " in the graphs")
end

-- A learning-rate scheduler changing lr on every step: lr is a graph input of the step (never a
-- constant), so the compiled step keeps its entries (and equals eager's); more in
-- lr_scheduler_training_compiles_once.lua.
do
  local function sched_run(compiled)
    tc.manual_seed(0)
    local model = nn.Linear(4, 2)
    local opt = optim.Adam(model:parameters(), {lr = 0.01})
    local sched = optim.lr_scheduler.CosineAnnealingLR(opt, 30)
    local train = h.train_function(model, tc.mse_loss, opt)
    local step = compiled and tc.compile(train) or train
    local x, y = tc.randn(5, 4), tc.randn(5, 2)
    local traces = {}
    for i = 1, 20 do
      step(x, y)
      sched:step()
      traces[i] = h.stats().traces
    end
    return model, traces
  end
  tc.compiler.reset()
  local eager = sched_run(false)
  local model, traces = sched_run(true)
  h.close_to_eager(model.weight, eager.weight, "scheduled lr: weight after 20 steps")
  h.eq(traces[20], traces[2], "scheduled lr: no traces after the second step")
end

-- Paths that read per-parameter step counts (numbers that grow every step) run uncompiled, one
-- break each, so they do not recompile as the counts grow: foreach, per parameter, and a fused
-- bucket whose parameters stopped stepping together (a parameter left without a gradient on
-- some steps).
for _, case in ipairs {"foreach", "per_parameter", "unused_on_odd_steps"} do
  local function go(compiled)
    tc.manual_seed(0)
    local model = nn.Linear(4, 2)
    local extra = tc.randn(2):requires_grad_()
    local opts = {lr = 0.01}
    if case == "foreach" then opts.foreach = true elseif case == "per_parameter" then opts.fused = false end
    local opt = optim.Adam({model.weight, model.bias, extra}, opts)
    local function train(x, y, use_extra)
      opt:zero_grad()
      local loss = tc.mse_loss(model(x), y)
      if use_extra then loss = loss + (extra * extra):sum() end
      loss:backward()
      opt:step()
      return loss
    end
    local step = compiled and tc.compile(train) or train
    local x, y = tc.randn(5, 4), tc.randn(5, 2)
    local traces = {}
    for i = 1, 14 do
      step(x, y, case ~= "unused_on_odd_steps" or i % 2 == 0)
      traces[i] = h.stats().traces
    end
    return {model.weight, model.bias, extra}, traces
  end
  tc.compiler.reset()
  local want = go(false)
  local got, traces = go(true)
  for i = 1, 3 do h.close_to_eager(got[i], want[i], case .. ": parameter " .. i) end
  h.eq(traces[14], traces[8], case .. ": no traces after the eighth step")
end

-- In a plain loop (explain above traces afresh, with the state made): the first step makes the
-- state at a break in Optimizer:step's own frame, the second misses that entry's guard once and
-- traces the fused update into a graph that the later steps run. (A break inside the update's
-- nested calls would be kept by every later call: the steps would stay uncompiled.)
do
  local out, rc = h.run([[
    package.path = "tests/capture/?.lua;" .. package.path
    local tc, nn, optim = require "tc", require "tc.nn", require "tc.optim"
    local model = nn.Linear(4, 2)
    local opt = optim.Adam(model:parameters(), {lr = 0.01})
    local step = tc.compile(require("helpers").train_function(model, tc.mse_loss, opt))
    local x, y = tc.randn(5, 4), tc.randn(5, 2)
    for i = 1, 5 do
      step(x, y)
      io.stderr:write("## step " .. i .. "\n")
    end
  ]], "--log=graph_code,recompiles")
  h.eq(rc, 0, "exit status:\n" .. out)
  h.eq(h.count(out, "%[tc recompiles%]"), 1, "one recompile (the state exists from the second step):\n" .. out)
  local after_first = out:match("## step 1\n(.*)$")
  assert(after_first:find("_fused_adam_(", 1, true), "no graph with the fused update after the first step:\n" .. out)
  local after_second = out:match("## step 2\n(.*)$")
  h.eq(h.count(after_second, "graph%("), 0, "steps after the second trace nothing:\n" .. after_second)
end
