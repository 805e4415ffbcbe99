-- A compiled training backward holds no tensor on another device than its graph's: arithmetic on
-- constants that a derivative formula does (sub's `other: grad * -alpha`) becomes a constant of the
-- backward graph, not a node making a 0-dim CPU tensor. On the GPU (skipped without one) the
-- backward of a conv/batch_norm model and of GPT-2 therefore goes to the CUDA code generator
-- rather than to eager, reduce-overhead records it as a CUDA graph, and K compiled steps equal
-- eager's.
local tc = require "tc"
local h = require "helpers"

-- CPU: sub's backward with alpha makes no node from constants alone, and equals eager
do
  local f = function(a, b) return (tc.sub(a, b, {alpha = 2}) * a):sum() end
  tc.manual_seed(0)
  local a, b = tc.randn(5, {requires_grad = true}), tc.randn(5, {requires_grad = true})
  local want = tc.autograd.grad(f(a, b), {a, b})
  local got = tc.autograd.grad(tc.compile(f)(a, b), {a, b})
  h.close_to_eager(got[1], want[1], "grad a")
  h.close_to_eager(got[2], want[2], "grad b")
  tc.compiler.reset()
  local report = tc.compiler.explain(f)(a, b)
  local ops = report.training[1]:match("backward graph of %d+ ops:(.*)$")
  assert(ops and not (" " .. ops .. " "):find(" neg ", 1, true), report.training[1])
  -- the dump: no backward node whose arguments are all numbers (neg(1) was one)
  local out, rc = h.run([[
    local tc = require "tc"
    local a, b = tc.randn(5, {requires_grad = true}), tc.randn(5, {requires_grad = true})
    tc.compile(function(a, b) return (a - b):mul(a):sum() end)(a, b):backward()
  ]], "--log=aot_graphs")
  h.eq(rc, 0, "exit status:\n" .. out)
  local backward = out:match("backward\n(graph%(.*)$")
  assert(backward, out)
  for line in backward:gmatch("[^\n]+") do
    assert(not line:match("= [%w_]+%([%d%.%-e, ]*%)$"), "a backward node computed from constants: " .. line)
  end
end

if not tc.cuda.is_available() then return end

-- GPU: the step's graphs all compile for the GPU (no "runs on eager" hint), reduce-overhead
-- records the backward too (three recordings a model: forward, backward, optimizer step), and
-- the losses and parameters of K compiled steps equal eager's
local script = [[
package.path = "scripts/models/?.lua;tests/capture/?.lua;" .. package.path
local tc, nn, optim = require "tc", require "tc.nn", require "tc.optim"
local F = nn.functional
tc.set_default_device("cuda")
local models = {
  cnn = function()
    local m = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
      nn.Linear(8 * 8 * 8, 10))
    return m, tc.randn(4, 3, 8, 8), tc.randint(1, 11, {4}), function(out, y) return F.cross_entropy(out, y) end
  end,
  gpt2 = function()
    local m = require("gpt2").gpt2({vocab_size = 50, n_positions = 16, n_embd = 32, n_layer = 2, n_head = 2})
    return m, tc.randint(1, 51, {2, 16}), tc.randint(1, 51, {2, 16}),
      function(out, y) return F.cross_entropy(out:view(-1, 50), y:view(-1)) end
  end,
}
local function run(name, mode)
  tc.compiler.reset()  -- each mode compiles its own entries (tc.optim's too)
  tc.manual_seed(0)
  local model, x, y, crit = models[name]()
  model:train()
  local opt = optim.Adam(model:parameters(), {lr = 1e-3})
  local step = require("helpers").train_function(model, crit, opt)
  local f = mode and tc.compile(step, {mode = mode}) or step
  local losses = {}
  for i = 1, 5 do losses[i] = f(x, y):item() end
  return losses, model:parameters()
end
for _, name in ipairs {"cnn", "gpt2"} do
  local want, pe = run(name)
  for _, mode in ipairs {"default", "reduce-overhead"} do
    io.stderr:write("## " .. name .. " " .. mode .. "\n")
    local got, pc = run(name, mode)
    for i = 1, #want do
      assert(math.abs(got[i] - want[i]) <= 1e-4 * (1 + math.abs(want[i])), name .. " " .. mode .. " loss " .. i)
    end
    for i = 1, #pe do
      local d = (pc[i] - pe[i]):abs():max():item()
      assert(d <= 1e-4, ("%s %s parameter %d: max difference %g"):format(name, mode, i, d))
    end
  end
end
print("ok")
]]
local path = os.tmpname() .. ".lua"
local f = assert(io.open(path, "w"))
f:write(script)
f:close()
local p = assert(io.popen("TC_DEBUG=1 " .. (h.tcrun or "build/tcrun") .. " --log=perf_hints " .. path .. " 2>&1"))
local out = p:read("a")
p:close()
os.remove(path)
assert(out:find("\nok\n", 1, true) or out:match("^ok\n"), out)
assert(not out:find("runs on eager", 1, true), out)
for name, section in out:gmatch("## (%w+) reduce%-overhead\n(.-)\n##") do
  local n = 0
  for _ in section:gmatch("reduce%-overhead: [^\n]* recorded %(") do n = n + 1 end
  assert(n >= 3, name .. ": " .. n .. " CUDA graph recordings (forward, backward, optimizer step expected)\n" .. section)
end
local tail = out:match("## gpt2 reduce%-overhead\n(.*)$")
local n = 0
for _ in (tail or ""):gmatch("reduce%-overhead: [^\n]* recorded %(") do n = n + 1 end
assert(n >= 3, "gpt2: " .. n .. " CUDA graph recordings\n" .. (tail or out))
