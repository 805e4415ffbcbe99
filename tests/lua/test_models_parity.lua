-- The model zoo (scripts/models) against PyTorch / torchvision (fixtures:
-- tests/fixtures/gen_nn_parity.py). Small models load PyTorch's weights from
-- parity/models.safetensors; ResNet-18/50, DenseNet-121 and Inception-v3 at full architecture get
-- weights by the generator's formula, rebuilt here with tc ops, and are compared on small inputs.
-- Loading is strict, so tc's parameter names and shapes must be torchvision's (after
-- tc.utils.from_torch_state_dict).
local tc = require "tc"
local nn = require "tc.nn"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local root = here .. "/../.."
if not package.path:find(root .. "/scripts/models/?.lua", 1, true) then
  package.path = root .. "/scripts/models/?.lua;" .. package.path
end
local PARITY = root .. "/tests/fixtures/parity/"

local cache = {}
local function fixture(file)
  if cache[file] == nil then cache[file] = table.pack(tc.load(PARITY .. file)) end
  return cache[file][1], cache[file][2]
end

local function parts(file, name)
  local r = {p = {}, ["in"] = {}, out = {}}
  local prefix = name .. "/"
  for key, t in pairs((fixture(file))) do
    if key:sub(1, #prefix) == prefix then
      local role, rest = key:sub(#prefix + 1):match("^([^/]+)/(.*)$")
      r[role][tonumber(rest) or rest] = t
    end
  end
  return r
end

local function assert_close(got, want, what, rtol, atol)
  if got.shape ~= want.shape then
    error(("%s: shape %s, expected %s"):format(what, tostring(got.shape), tostring(want.shape)), 2)
  end
  local g, w = got:double(), want:double()
  local diff = (g - w):abs()
  local excess = (diff - (w:abs() * rtol + atol)):amax():item()
  if excess > 0 or excess ~= excess then
    error(("%s: max |difference| %.3g exceeds the tolerance (rtol %g, atol %g)"):format(
      what, diff:amax():item(), rtol, atol), 2)
  end
end

local function check_model(model, file, name, prep, rtol, atol)
  local f = parts(file, name)
  assert(next(f.p), "no weights for " .. name)
  model:load_state_dict(tc.utils.from_torch_state_dict(f.p))
  model:eval()
  local x = prep and prep(f["in"][1]) or f["in"][1]
  local y = tc.no_grad(function() return model(x) end)
  assert_close(y, f.out[1], name, rtol or 1e-4, atol or 1e-5)
end

-- ---- weights by formula (see formula_tensor in gen_nn_parity.py) ----------------------------------
local STEP, PHASE, GAIN = 2.399963, 0.61, 1.6
local SCALE_SHIFT = {b = {0.1, 0.0}, bn_w = {0.1, 1.0}, bn_b = {0.1, 0.0}, rm = {0.1, 0.0}, rv = {0.25, 1.0}}

local function formula_tensor(shape, kind, k, fan_in)
  if kind == "nbt" then return tc.zeros_like(tc.tensor(0, {dtype = tc.int64})):expand(shape):clone() end
  local scale, shift
  if kind == "w" then scale, shift = GAIN / math.sqrt(fan_in), 0.0 else scale, shift = table.unpack(SCALE_SHIFT[kind]) end
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local s = (tc.arange(n, {dtype = tc.float64}) * STEP + k * PHASE):sin()
  return (s * scale + shift):float():reshape(shape)
end

-- Loads formula weights into model from the "<name>.params" metadata lines (torch key, kind,
-- position k, fan_in), using the shapes of tc's own state_dict.
local function load_formula(model, name)
  local _, meta = fixture("formula_models.safetensors")
  local lines = assert(meta[name .. ".params"], "no formula metadata for " .. name)
  local own = model:state_dict()
  local sd, count = {}, 0
  for key, kind, k, fan_in in lines:gmatch("(%S+) (%S+) (%d+) (%d+)") do
    local tc_key = next(tc.utils.from_torch_state_dict({[key] = true}))
    local t = own[tc_key]
    assert(t, ("torchvision's %s (tc name %s) has no counterpart in tc's %s"):format(key, tc_key, name))
    sd[tc_key] = formula_tensor(t.shape, kind, tonumber(k), tonumber(fan_in))
    count = count + 1
  end
  model:load_state_dict(sd)  -- strict: tc has no entry torchvision lacks
  return count
end

local function check_formula_model(model, name, rtol, atol)
  load_formula(model, name)
  model:eval()
  local f = parts("formula_models.safetensors", name)
  local y = tc.no_grad(function() return model(f["in"][1]) end)
  assert_close(y, f.out[1], name, rtol, atol)
end

local tests = {}

function tests.seed_64_layer_model()
  local M = require "seed_layers"
  local model = M.Model()
  assert(#model.layers == 64)
  check_model(model, "models.safetensors", "seed_layers")
end

function tests.my_module()
  local M = require "my_module"
  check_model(M.MyModule(), "models.safetensors", "my_module")
end

function tests.gpt2_small_config()
  local M = require "gpt2"
  local model = M.gpt2({vocab_size = 100, n_positions = 16, n_embd = 64, n_layer = 2, n_head = 4})
  check_model(model, "models.safetensors", "gpt2", function(ids) return ids + 1 end, 1e-4, 1e-5)
end

function tests.gpt2_lm_head_is_tied()
  local M = require "gpt2"
  local model = M.gpt2({vocab_size = 50, n_positions = 8, n_embd = 16, n_layer = 1, n_head = 2})
  for name in model:named_parameters() do assert(not name:find("lm_head"), name) end
  local y = model(tc.randint(1, 51, {1, 8}))
  assert(y.shape == tc.Size({1, 8, 50}))
end

function tests.resnet18_full_architecture()
  check_formula_model(require("resnet").resnet18(), "resnet18", 1e-3, 1e-4)
end

function tests.resnet50_full_architecture()
  check_formula_model(require("resnet").resnet50(), "resnet50", 1e-3, 1e-4)
end

function tests.densenet121_full_architecture()
  check_formula_model(require("densenet").densenet121(), "densenet121", 1e-3, 1e-4)
end

function tests.inception_v3_full_architecture()
  check_formula_model(require("inception").inception_v3(), "inception_v3", 1e-3, 1e-4)
end

function tests.parameter_counts_match_torchvision()
  -- torchvision's parameter counts (numel over parameters(), buffers excluded)
  local expected = {resnet18 = 11689512, resnet50 = 25557032, densenet121 = 7978856, inception_v3 = 23834568}
  local makers = {resnet18 = function() return require("resnet").resnet18() end,
                  resnet50 = function() return require("resnet").resnet50() end,
                  densenet121 = function() return require("densenet").densenet121() end,
                  inception_v3 = function() return require("inception").inception_v3() end}
  for name, make in pairs(makers) do
    local n = 0
    for _, p in ipairs(make():parameters()) do n = n + p:numel() end
    assert(n == expected[name], ("%s: %d parameters, torchvision has %d"):format(name, n, expected[name]))
  end
end

return tests
