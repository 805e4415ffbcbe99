-- Compiled training: K steps of the tutorial's train function (zero_grad, loss = crit(model(x),
-- y), loss:backward(), opt:step()) compiled with tc.compile give eager's losses and parameters
-- (DESIGN.md §4 tolerances) for the seed's toy model, an MLP with dropout, a small CNN (conv,
-- batch norm, pooling) and a tiny GPT-2, on the eager, cpu and loopir backends and with
-- mode="reduce-overhead" (CUDA graphs on the GPU; the same graphs on the CPU). The forward before
-- backward() is a training entry whose backward graph is compiled once and runs at
-- loss:backward(). As DESIGN.md §4 asks, both are measured against a float64 eager run: the
-- compiled error is at most twice eager's plus a small tolerance.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"
local h = require "helpers"
local seed_layers = require "seed_layers"
local gpt2 = require "gpt2"

local K = 3

local models = {
  toy = function()
    return seed_layers.Model({num_layers = 4}), tc.randn(8, 10), tc.randn(8, 10), nn.MSELoss(),
      function(m) return optim.Adam(m:parameters(), {lr = 0.01}) end
  end,
  mlp = function()  -- dropout: the compiled forward draws eager's masks and saves them
    local m = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    return m, tc.randn(8, 4), tc.randint(1, 4, {8}), nn.CrossEntropyLoss(),
      function(mm) return optim.SGD(mm:parameters(), {lr = 0.1, momentum = 0.9}) end
  end,
  cnn = function()
    local m = nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(4, 8, 3, {padding = 1}), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    return m, tc.randn(4, 1, 8, 8), tc.randint(1, 4, {4}), nn.CrossEntropyLoss(),
      -- SGD: the first conv's bias feeds a batch norm, so its gradient is rounding noise, which Adam
      -- would scale up to lr-sized steps that differ between any two summation orders (the same
      -- for GPT-2's key biases)
      function(mm) return optim.SGD(mm:parameters(), {lr = 0.05, momentum = 0.9}) end
  end,
  gpt2 = function()
    local m = gpt2.gpt2({vocab_size = 50, n_positions = 8, n_embd = 16, n_layer = 1, n_head = 2})
    local ids = tc.randint(1, 51, {2, 8})
    local crit = function(logits, y) return F.cross_entropy(logits:reshape(-1, 50), y:reshape(-1)) end
    return m, ids, tc.randint(1, 51, {2, 8}), crit,
      function(mm) return optim.SGD(mm:parameters(), {lr = 0.1, momentum = 0.9, weight_decay = 0.01}) end
  end,
}

local function run(name, backend, double, mode)
  tc.manual_seed(0)
  local model, x, y, crit, make_opt = models[name]()
  if double then
    model:double()
    if x:is_floating_point() then x = x:double() end
    if y:is_floating_point() then y = y:double() end
  end
  local train = h.train_function(model, crit, make_opt(model))
  local step = backend and tc.compile(train, {backend = backend, mode = mode}) or train
  local losses = {}
  for i = 1, K do losses[i] = step(x, y) end
  return losses, model
end

-- compiled's error against the float64 run at most 2x eager's + tol
local function within(compiled, eager, ref, what)
  local c, e, r = compiled:double(), eager:double(), ref:double()
  local excess = ((c - r):abs() - (e - r):abs() * 2 - (r:abs() + 1) * 1e-5):max():item()
  if excess > 0 then
    error(("%s: compiled differs by %g from float64, eager by %g"):format(what, (c - r):abs():max():item(),
      (e - r):abs():max():item()), 2)
  end
end

for _, name in ipairs {"toy", "mlp", "cnn", "gpt2"} do
  local ref_losses, ref = run(name, nil, true)
  local want, eager = run(name)
  local backends = {"eager", "cpu", "loopir", "tc reduce-overhead"}
  -- `tcrun --device=cuda tests/capture/run.lua compiled_train` runs it on the GPU
  if tc.get_default_device():sub(1, 4) == "cuda" then backends = {"eager", "tc", "tc reduce-overhead"} end
  for _, backend in ipairs(backends) do
    tc.compiler.reset()
    local b, mode = backend:match("^(%S+) ?(%S*)$")
    local got, model = run(name, b, false, mode ~= "" and mode or nil)
    local what = name .. " on " .. backend
    for i = 1, K do within(got[i], want[i], ref_losses[i], what .. ": loss of step " .. i) end
    local pr, pe, pc = ref:parameters(), eager:parameters(), model:parameters()
    for i = 1, #pe do within(pc[i], pe[i], pr[i], what .. ": parameter " .. i .. " after " .. K .. " steps") end
    local s = h.stats()
    h.eq(s.training_eager, 0, what .. ": graphs trained op by op")
    assert(s.training_entries >= 1, what .. ": no training entry")
    h.eq(s.backward_compiles, s.training_entries, what .. ": one backward compile per training entry")
  end
end

-- Where the train function breaks: only at loss:backward(). opt:zero_grad() traces into the
-- forward's graph (p.grad is a guarded input, p.grad = nil an effect) and opt:step() into the
-- graph after the break (its fused op writes parameters and state in place). The first step,
-- which makes the optimizer's state, breaks inside it too (as torch runs _init_group eagerly).
do
  tc.manual_seed(0)
  local model, x, y, crit, make_opt = models.toy()
  local train = h.train_function(model, crit, make_opt(model))
  train(x, y)
  local report = tc.compiler.explain(train)(x, y)
  local lines = {}
  for i, b in ipairs(report.break_reasons) do lines[i] = b.code .. " " .. b.source_line:match("^%s*(.-)%s*$") end
  h.eq(table.concat(lines, "; "), "TC0204 loss:backward()", "break reasons")
  h.eq(report.graph_count, 2, "forward graph and optimizer graph")
  h.eq(table.concat(report.ops_per_graph[2], ","), "add,copy_,_fused_adam_", "the optimizer's graph")
end
