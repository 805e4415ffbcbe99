-- Every tc.nn layer with parameters trains: after one backward of sum(out * w) in float64, each
-- parameter has a gradient of its shape that equals central finite differences at a few of its
-- elements (batch norm in training mode, attention and the transformer layer included), and a few
-- SGD steps on that loss lower it. (Forward values against PyTorch: test_nn_layers.lua.)
local tc = require "tc"
local nn = require "tc.nn"
local optim = require "tc.optim"

local f64 = {dtype = tc.float64}
local EPS, RTOL, ATOL = 1e-6, 1e-5, 1e-7

-- name -> {make() -> module, input() -> args}
local layers = {
  linear = {function() return nn.Linear(5, 3) end, function() return tc.randn(4, 5, f64) end},
  bilinear = {function() return nn.Bilinear(3, 4, 2) end, function() return tc.randn(5, 3, f64), tc.randn(5, 4, f64) end},
  conv1d = {function() return nn.Conv1d(4, 6, 3, {stride = 2, padding = 1, groups = 2}) end,
            function() return tc.randn(2, 4, 7, f64) end},
  conv2d = {function() return nn.Conv2d(3, 4, 3, {padding = 1, dilation = 1}) end, function() return tc.randn(2, 3, 5, 5, f64) end},
  conv_transpose2d = {function() return nn.ConvTranspose2d(3, 2, 3, {stride = 2, padding = 1, output_padding = 1}) end,
                      function() return tc.randn(1, 3, 3, 3, f64) end},
  batchnorm1d = {function() return nn.BatchNorm1d(4) end, function() return tc.randn(6, 4, f64) end},
  batchnorm2d = {function() return nn.BatchNorm2d(3) end, function() return tc.randn(2, 3, 3, 3, f64) end},
  layernorm = {function() return nn.LayerNorm({4, 5}) end, function() return tc.randn(3, 4, 5, f64) end},
  groupnorm = {function() return nn.GroupNorm(2, 6) end, function() return tc.randn(2, 6, 3, f64) end},
  rmsnorm = {function() return nn.RMSNorm(8) end, function() return tc.randn(3, 8, f64) end},
  embedding = {function() return nn.Embedding(10, 4, {padding_idx = 3}) end,
               function() return tc.tensor({{1, 3, 5}, {3, 10, 2}}) end},
  mha = {function() return nn.MultiheadAttention(8, 2) end,
         function() local x = tc.randn(4, 2, 8, f64); return x, x, x, {need_weights = false} end},
  transformer_encoder = {function() return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 12, dropout = 0}) end,
                         function() return tc.randn(3, 2, 8, f64) end},
}

-- the loss of the module's first output
local function loss_of(m, args, w)
  local out = m(table.unpack(args, 1, args.n))
  if type(out) == "table" then out = out[1] end
  return (out * w):sum()
end

local function check_layer(name, spec)
  tc.manual_seed(7)
  local m = spec[1]():double()
  m:train()
  local args = table.pack(spec[2]())
  tc.manual_seed(8)
  local out = m(table.unpack(args, 1, args.n))
  local w = tc.randn((type(out) == "table" and out[1] or out).shape, f64)
  -- batch norm's running statistics change with every forward; they do not enter the loss in
  -- training mode, so the finite differences below see the same function
  loss_of(m, args, w):backward()
  local n = 0
  for pname, p in m:named_parameters() do
    assert(p.grad ~= nil, name .. ": " .. pname .. " got no gradient")
    assert(p.grad.shape == p.shape, name .. ": " .. pname .. " gradient of another shape")
    local flat, g = p:detach():view(-1), p.grad:view(-1)
    local k = p:numel()
    for _, i in ipairs {1, (k + 1) // 2, k} do
      local old = flat[i]:item()
      local vals = {}
      for _, s in ipairs {1, -1} do
        flat[i] = old + s * EPS
        vals[s] = tc.no_grad(loss_of, m, args, w):item()
      end
      flat[i] = old
      local num, ana = (vals[1] - vals[-1]) / (2 * EPS), g[i]:item()
      if math.abs(num - ana) > ATOL + RTOL * math.abs(num) then
        error(("%s: %s[%d] gradient %.10g, finite differences %.10g"):format(name, pname, i, ana, num))
      end
    end
    n = n + 1
  end
  assert(n > 0, name .. ": no parameters")
  -- a few SGD steps lower the loss
  local opt = optim.SGD(m:parameters(), {lr = 1e-3})
  local first = loss_of(m, args, w):item()
  for _ = 1, 3 do
    opt:zero_grad()
    loss_of(m, args, w):backward()
    opt:step()
  end
  local last = loss_of(m, args, w):item()
  assert(last < first, ("%s: the loss did not fall (%g -> %g)"):format(name, first, last))
end

local T = {}
for name, spec in pairs(layers) do
  T[name .. "_parameter_gradients_match_finite_differences"] = function() check_layer(name, spec) end
end
return T
