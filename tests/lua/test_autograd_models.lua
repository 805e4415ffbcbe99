-- Parameter gradients of the model zoo after one backward against PyTorch's (fixtures:
-- tests/fixtures/gen_autograd_models.py -> tests/fixtures/autograd/model_grads.json; weights and
-- inputs from parity/models.safetensors). loss = sum(out * cos(0..n-1)); each parameter's gradient
-- g is compared through probes: sum(g), two fixed projections, max |g| (float32 tolerances).
local tc = require "tc"
local json = require "json"
local nn = require "tc.nn"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local root = here .. "/../.."
if not package.path:find(root .. "/scripts/models/?.lua", 1, true) then
  package.path = root .. "/scripts/models/?.lua;" .. package.path
end

-- (PyTorch's probes by case, the weights and inputs) of a fixture pair, read once
local loaded = {}
local function fixture_pair(json_name, weights_path)
  if not loaded[json_name] then
    local f = assert(io.open(here .. "/../fixtures/autograd/" .. json_name))
    loaded[json_name] = {json.decode(f:read("a")), tc.load(root .. "/tests/fixtures/" .. weights_path)}
    f:close()
  end
  return table.unpack(loaded[json_name])
end
local function fixtures() return fixture_pair("model_grads.json", "parity/models.safetensors") end

local function probes(g)
  g = g:double():reshape(-1)
  local i = tc.arange(0, g:numel(), {dtype = tc.float64})
  return {g:sum():item(), (g * (i * 0.37 + 1):sin()):sum():item(), (g * (i * 1.3 + 2):sin()):sum():item(),
          g:abs():amax():item()}
end

-- want: PyTorch's probes per parameter; w: tensors named <prefix>p/<torch name>, <prefix>in/1
-- (and <prefix>out/1: PyTorch's output, compared first when present).
local function check_grads(name, want, w, prefix, model, prep)
  local sd = {}
  for k, t in pairs(w) do
    local key = k:sub(1, #prefix) == prefix and k:sub(#prefix + 1):match("^p/(.*)$")
    if key then sd[key] = t end
  end
  model:load_state_dict(tc.utils.from_torch_state_dict(sd))
  local x = w[prefix .. "in/1"]
  if prep then x = prep(x) end
  local y = model(x)
  local want_out = w[prefix .. "out/1"]
  if want_out then
    local d = (y:detach():double() - want_out:double()):abs():amax():item()
    assert(d < 1e-4 * (want_out:abs():amax():item() + 1), name .. ": output differs from PyTorch's by " .. d)
  end
  local wt = tc.arange(0, y:numel(), {dtype = tc.float64}):cos():to(y.dtype):view(y.shape)
  ;(y * wt):sum():backward()
  local params = {}
  for n, p in model:named_parameters() do params[n] = p end
  local count = 0
  for torch_key, pw in pairs(want) do
    local key = next(tc.utils.from_torch_state_dict({[torch_key] = true}))
    local p = assert(params[key], name .. ": no parameter " .. key)
    assert(p.grad ~= nil, name .. ": " .. key .. " got no gradient")
    local got = probes(p.grad)
    local tol = 2e-4 * pw[4] * math.sqrt(p:numel()) + 1e-6
    for j = 1, 4 do
      if math.abs(got[j] - pw[j]) > tol + 1e-4 * math.abs(pw[j]) then
        error(("%s: %s probe %d is %.6g, PyTorch's %.6g"):format(name, key, j, got[j], pw[j]))
      end
    end
    count = count + 1
  end
  assert(count > 0)
end

local function check(name, model, prep)
  local want, w = fixtures()
  check_grads(name, want[name], w, name .. "/", model, prep)
end

local T = {}
function T.seed_64_layer_model_grads_match_pytorch() check("seed_layers", require("seed_layers").Model()) end
function T.my_module_grads_match_pytorch() check("my_module", require("my_module").MyModule()) end
function T.gpt2_small_config_grads_match_pytorch()
  local model = require("gpt2").gpt2({vocab_size = 100, n_positions = 16, n_embd = 64, n_layer = 2, n_head = 4})
  check("gpt2", model, function(ids) return ids + 1 end)
end
-- Small CNNs from scripts/models in training mode (batch norm on batch statistics):
-- tests/fixtures/gen_autograd_cnn.py
local function check_cnn(name, model)
  local want, weights = fixture_pair("cnn_model_grads.json", "autograd/cnn_models.safetensors")
  model:train()
  check_grads(name, want[name], weights, name .. "/", model)
end
-- densenet.lua's DenseNet at a tiny size: concatenations, transitions, pooling
function T.densenet_tiny_training_mode_grads_match_pytorch()
  check_cnn("densenet_tiny", require("densenet").DenseNet(4, {2, 2}, 8, 2, 5))
end
-- resnet.lua's BasicBlock (stride 2, downsample) and Bottleneck: the full ResNets' layers
function T.resnet_blocks_training_mode_grads_match_pytorch()
  local R = require "resnet"
  local down = nn.Sequential(nn.Conv2d(4, 8, 1, {stride = 2, bias = false}), nn.BatchNorm2d(8))
  check_cnn("resnet_blocks", nn.Sequential(R.BasicBlock(4, 8, 2, down), R.Bottleneck(8, 2)))
end
return T
