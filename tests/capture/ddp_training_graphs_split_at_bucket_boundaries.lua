-- Compiled DDP without processes (capture/ddp_split.h): a training graph whose parameters a DDP
-- module marked (tc.compiler._ddp_mark_parameters, what DistributedDataParallel calls at wrap
-- time) is split, walking backwards, where the parameters fill a bucket; each subgraph is its own
-- training node, so the last layers' gradients are accumulated (and their hooks, which launch
-- DDP's all-reduces, fire) before the first layers' backward runs. Gradients equal eager's.
local tc = require "tc"
local nn = tc.nn
local h = require "helpers"

-- four Linear(8, 8) layers: 288 bytes of float32 parameters each; "tied": layer 1 used again
-- last; "preamble": ops without parameters before the first layer
local function model(variant)
  tc.manual_seed(3)
  local layers = {nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)}
  local m = nn.Sequential(table.unpack(layers))
  if variant == "tied" then return m, function(x) return layers[1](m(x)):sum() end end
  if variant == "preamble" then return m, function(x) return m((x * 2):tanh()):sum() end end
  return m, function(x) return m(x):sum() end
end

local function case(cap, variant, subgraphs)
  tc.compiler.reset()
  local x = tc.randn(4, 8)
  local em, ef = model(variant)
  ef(x):backward()
  local m, f = model(variant)
  local params = m:parameters()
  tc.compiler._ddp_mark_parameters(params, cap)
  -- when the last layer's weight gets its gradient, has the first layer's?
  local first_ready_before_last
  params[#params - 1]:register_post_accumulate_grad_hook(function() first_ready_before_last = params[1].grad ~= nil end)
  tc.compile(f)(x):backward()
  local what = ("cap %d, %s"):format(cap, variant or "layers")
  local s = h.stats()
  h.eq(s.ddp_subgraphs, subgraphs > 1 and subgraphs or 0, what .. ": subgraphs")
  h.eq(s.training_eager, 0, what .. ": subgraphs trained op by op")
  for i, p in ipairs(params) do h.close_to_eager(p.grad, em:parameters()[i].grad, what .. ": gradient " .. i) end
  h.eq(first_ready_before_last, subgraphs == 1, what .. ": first layer's gradient ready before the last one's")
  -- explain says how the graph was split
  tc.compiler.reset()
  local report = tc.compiler.explain(f)(x)
  local line
  for _, l in ipairs(report.training) do line = line or (l:find("DDP graph", 1, true) and l) end
  local want = subgraphs > 1 and ("DDP graph split into %d subgraphs"):format(subgraphs) or "DDP graph not split"
  assert(line and line:find(want, 1, true), what .. ": explain says " .. tostring(line))
end

case(288, nil, 4)      -- a bucket per layer
case(600, nil, 2)      -- layers 4+3 (576 bytes) are short of a bucket: 4, 3, 2 | 1
case(1 << 30, nil, 1)  -- one bucket: not split
-- layer 1 is used first and last: the last subgraph gets it as a view made by the first, so its
-- gradient is accumulated once, by the first subgraph's backward (gradients equal eager's)
case(288, "tied", 4)
-- the parameter-free ops before layer 1 join its subgraph instead of making a fifth
case(288, "preamble", 4)
