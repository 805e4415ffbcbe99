-- A reduce-overhead training step (zero_grad, forward, backward, Adam) copies no gradients into
-- the optimizer graph's static buffers (`tcrun --device=cuda tests/capture/run.lua
-- reduce_overhead_train`; on the CPU it checks values only): the backward graph's gradients are
-- handed out over storages of their own, the autograd engine makes them .grad without a copy,
-- so each step's p.grad sits where the optimizer graph was recorded to read it. Losses and
-- parameters equal eager's after every step.
local tc = require "tc"
local nn = require "tc.nn"
local optim = require "tc.optim"
local h = require "helpers"

local on_gpu = tc.get_default_device():sub(1, 4) == "cuda"
local function setup()
  tc.manual_seed(0)
  local model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))  -- 1.04 MiB of gradients
  return model, h.train_function(model, nn.CrossEntropyLoss(), optim.Adam(model:parameters(), {lr = 1e-3}))
end
local model, train = setup()
local eager_model, eager_train = setup()
local compiled = tc.compile(train, {mode = "reduce-overhead"})
local x, y = tc.randn(8, 256), tc.randint(1, 11, {8})
local s0
for step = 1, 7 do
  if step == 5 and on_gpu then  -- warm-ups and recordings done
    tc.cuda.synchronize()
    s0 = tc.cuda.graph_stats()
  end
  h.close_to_eager(compiled(x, y), eager_train(x, y), "loss of step " .. step)
end
local p, pe = model:parameters(), eager_model:parameters()
for i = 1, #p do h.close_to_eager(p[i], pe[i], "parameter " .. i .. " after 7 steps") end
if on_gpu then
  local s = tc.cuda.graph_stats()
  assert(s.replays - s0.replays >= 9, "three steps replay the forward, backward and optimizer graphs")
  -- (the forward's small outputs are copied out of its pool at once, so the backward copies the
  -- saved 8x1024 activation, 32 KiB, and the step's host scalars; the gradients are 1.04 MiB)
  assert(s.bytes_copied - s0.bytes_copied < 3 * 64 * 1024, ("%d bytes copied into static buffers in 3 steps"):format(
    s.bytes_copied - s0.bytes_copied))
end
