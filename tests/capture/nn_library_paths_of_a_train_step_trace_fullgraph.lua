-- tc's own Lua library traces without graph breaks on the paths a compiled training step takes:
-- parameters / named_parameters / buffers (a tied weight listed once), state_dict, zero_grad of
-- the module and of the optimizer, clip_grad_norm_ and clip_grad_value_, the optimizer's step and
-- its state. Each piece compiles with fullgraph = true and gives eager's values;
-- scripts/examples/train.lua compile=step runs without recompile-limit warnings (it hit the limit
-- in named_tensors's tensor-keyed `seen` table, TC0401, 16 breaks a step).
local tc, nn, optim = require "tc", require "tc.nn", require "tc.optim"
local h = require "helpers"

local function make()
  tc.manual_seed(0)
  -- (the ReLU before the batch norm: a bias right before it has a zero gradient in exact arithmetic,
  -- pure rounding noise that AdamW scales up to lr, so its values would differ by device)
  local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 4), nn.Linear(4, 4))
  m[5].weight = m[4].weight  -- tied: one parameter in two modules
  local opt = optim.AdamW(m:parameters(), {lr = 0.01})
  return m, opt
end
local x, y = tc.randn(6, 3), tc.randn(6, 4)

local function strict(f) return tc.compile(f, {fullgraph = true}) end

-- listing parameters and buffers
local m = make()
local names = strict(function(mod)
  local out = {}
  for name, p in mod:named_parameters() do out[#out + 1] = name .. ":" .. p:numel() end
  for name in mod:named_buffers() do out[#out + 1] = name end
  local n_state = 0
  for _ in pairs(mod:state_dict()) do n_state = n_state + 1 end
  return table.concat(out, ","), #mod:parameters(), #mod:buffers(), n_state
end)
local function eager_names(mod)
  local out = {}
  for name, p in mod:named_parameters() do out[#out + 1] = name .. ":" .. p:numel() end
  for name in mod:named_buffers() do out[#out + 1] = name end
  return table.concat(out, ",")
end
local listed, np, nb, ns = names(m)
h.eq(listed, eager_names(m), "named_parameters and named_buffers")
h.eq(listed:find("5.weight", 1, true), nil, "the tied weight is listed once")
h.eq(np, 7, "parameters (the tied weight once)")
h.eq(nb, 3, "buffers")
h.eq(ns, 11, "state_dict entries (the tied weight under both names, as PyTorch)")
-- a buffer slot given a plain tensor (no registration) is still listed once
m[3].running_mean = tc.zeros(4)
h.eq(select(3, names(m)), 3, "buffers after assigning a buffer slot")

-- a train step in compiled pieces against the same steps eager: before backward (zero_grad,
-- forward, loss) and after it (clipping, the optimizer's step)
local function forward_part(mod, opt)
  opt:zero_grad()
  mod:zero_grad()
  return tc.mse_loss(mod(x), y)
end
local function update_part(mod, opt)
  local norm = nn.utils.clip_grad_norm_(mod:parameters(), 0.5)
  nn.utils.clip_grad_value_(mod:parameters(), 0.05)
  opt:step()
  return norm, opt.state[mod:parameters()[1]].exp_avg:clone()
end
local me, oe = make()
local mc, oc = make()
local cf, cu = strict(forward_part), strict(update_part)
-- the first optimizer step makes the state (a deliberate break, tc.optim.lua): eager in both
for _, pair in ipairs {{me, oe}, {mc, oc}} do
  forward_part(pair[1], pair[2]):backward()
  update_part(pair[1], pair[2])
end
tc.compiler.reset()
for step = 1, 3 do
  local le, lc = forward_part(me, oe), cf(mc, oc)
  h.close_to_eager(lc, le, "loss of step " .. step)
  le:backward()
  lc:backward()
  local ne, se = update_part(me, oe)
  local nc, sc = cu(mc, oc)
  h.close_to_eager(nc, ne, "gradient norm of step " .. step)
  h.close_to_eager(sc, se, "optimizer state of step " .. step)
end
local pe, pc = me:parameters(), mc:parameters()
for i = 1, #pe do h.close_to_eager(pc[i], pe[i], "parameter " .. i) end
h.eq(h.stats().graph_breaks, 0, "graph breaks")
h.eq(h.stats().recompiles, 0, "recompiles")

-- the project's example: compile=step warns about nothing
local out, rc = h.run("arg = {'compile=step', 'epochs=2', 'steps=6', 'batch=16'}\n"
  .. "dofile('scripts/examples/train.lua')")
h.eq(rc, 0, out)
h.eq(out:find("recompile limit", 1, true), nil, out)
h.eq(out:find("tc.nn", 1, true), nil, out)
