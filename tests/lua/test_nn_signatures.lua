-- Every tc.nn layer takes PyTorch's positional arguments in PyTorch's order. The order comes from
-- tests/fixtures/api/nn_signatures.json (inspect.signature of torch 1.13's classes, plus the parameters
-- PyTorch 2.x added, marked "since"; made by tests/fixtures/gen_nn_signatures.py). Each layer is
-- built positionally with a distinct value for every parameter and must equal, field by field and
-- with the same random initialisation, the layer built with the options table.
local tc = require "tc"
local nn = require "tc.nn"
local json = require "json"
local fixtures = require "fixtures"
local check = require "check"

local function signatures() return fixtures.json("api/nn_signatures.json").layers end

-- The value given to each parameter (by name; per layer where needed). The values of one layer's
-- parameters differ from each other where they can (booleans alternate), so a swap of two in
-- tc's order would show; tc's only-default parameters (padding_mode ...) get their default.
local function value_of(layer, name)
  local per_layer = {
    Sequential = {["*args"] = {nn.ReLU(), nn.Tanh()}},
    ModuleList = {modules = {nn.ReLU(), nn.Tanh()}},
    ModuleDict = {modules = {a = nn.ReLU(), b = nn.Tanh()}},
    Identity = {["*args"] = {54}, ["**kwargs"] = {unused = 0.1}},
    BatchNorm1d = {track_running_stats = true}, BatchNorm2d = {track_running_stats = true},
    MultiheadAttention = {bias = true},
    TransformerEncoderLayer = {norm_first = false, bias = true},
  }
  if per_layer[layer] and per_layer[layer][name] ~= nil then return per_layer[layer][name] end
  return ({
    in_features = 4, out_features = 6, in1_features = 3, in2_features = 5, bias = false, device = "cpu",
    dtype = tc.float64, in_channels = 8, out_channels = 6, kernel_size = 5, stride = 3, padding = 7,
    output_padding = 1, dilation = 4, groups = 2, padding_mode = "zeros", num_features = 5, eps = 1e-3,
    momentum = 0.3, affine = false, track_running_stats = false, normalized_shape = {2, 3},
    -- with bias = false a LayerNorm keeps its weight, so a swap of the two would show
    elementwise_affine = true, num_groups = 2, num_channels = 6, num_embeddings = 10, embedding_dim = 3,
    padding_idx = 2, norm_type = 3.0, scale_grad_by_freq = false, sparse = false,
    _weight = tc.arange(30, {dtype = tc.float64}):view(10, 3), _freeze = true, p = 0.25, inplace = true,
    approximate = "tanh", dim = 2, negative_slope = 0.2, start_dim = 3, end_dim = -2, return_indices = false,
    ceil_mode = true, count_include_pad = false, output_size = {2, 3}, embed_dim = 8, num_heads = 2,
    dropout = 0.125, add_bias_kv = false, add_zero_attn = false, kdim = 8, vdim = 8, batch_first = true,
    d_model = 8, nhead = 2, dim_feedforward = 16, activation = "gelu", layer_norm_eps = 1e-6,
    norm_first = true, weight = tc.tensor {1.0, 2.0, 3.0}, ignore_index = 3, reduction = "sum",
    label_smoothing = 0.1, pos_weight = tc.tensor {0.5, 1.5, 2.5},
  })[name]
end

-- nn.ModuleDict's one argument is a table of name = module, so it is never an options table.
local no_options_form = {ModuleDict = true}

-- The arguments of three calls building the same layer: all positional; required ones positional
-- with the rest in the options table; half positional with the rest in the options table.
-- Variadic arguments (*args) are positional in every form. Each is {n = count, ...}.
local function forms(sig)
  local fixed, rest, kw = {}, {}, nil
  for _, p in ipairs(sig.params) do
    if p.name == "*args" then rest = value_of(sig.name, "*args")
    elseif p.name == "**kwargs" then kw = value_of(sig.name, "**kwargs")
    else fixed[#fixed + 1] = p end
  end
  local function call(npos, by_name)
    local a, n = {}, 0
    for i = 1, npos do n = n + 1; a[n] = value_of(sig.name, fixed[i].name) end
    for _, v in ipairs(rest or {}) do n = n + 1; a[n] = v end
    local opts = {}
    if by_name then
      for i = npos + 1, #fixed do opts[fixed[i].name] = value_of(sig.name, fixed[i].name) end
    end
    for k, v in pairs(kw or {}) do opts[k] = v end
    if by_name or kw then n = n + 1; a[n] = opts end
    a.n = n
    return a
  end
  local required = 0
  for _, p in ipairs(fixed) do if p.required then required = required + 1 end end
  return call(#fixed, false), call(required, true), call(math.max(required, #fixed // 2), true)
end

-- The layer from args, with the same random initialisation every time.
local function make(name, args)
  tc.manual_seed(7)
  return nn[name](table.unpack(args, 1, args.n))
end

-- Deep equality of two layers: every field (raw, both ways), tensors by shape, dtype, device,
-- requires_grad and values, modules and plain tables (registration order, _kind ...) recursively.
local function same(va, vb, where)
  if tc.is_tensor(va) then
    assert(tc.is_tensor(vb), where .. ": a tensor on one side only")
    check.eq(tostring(vb.shape), tostring(va.shape), where .. " shape")
    check.eq(vb.dtype, va.dtype, where .. " dtype")
    check.eq(vb.device, va.device, where .. " device")
    check.eq(vb.requires_grad, va.requires_grad, where .. " requires_grad")
    assert(va:eq(vb):all():item(), where .. ": values differ")
  elseif type(va) == "table" and (getmetatable(va) == nil or nn.is_module(va)) then
    assert(type(vb) == "table" and nn.is_module(va) == nn.is_module(vb), where .. ": a table on one side only")
    for _, m in ipairs {{va, vb}, {vb, va}} do
      for k, v in pairs(m[1]) do
        if rawget(m[2], k) == nil then error(("%s.%s: present on one side only"):format(where, tostring(k)), 0) end
        same(rawget(va, k), rawget(vb, k), where .. "." .. tostring(k))
      end
    end
  else
    check.eq(vb, va, where)
  end
end

-- The layer classes of tc.nn: subclasses of nn.Module (nn.Module itself is abstract).
local function tc_layers()
  local names = {}
  for name, v in pairs(nn) do
    if type(v) == "table" and v ~= nn.Module and rawget(v, "super") ~= nil and name:match("^%u") then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  return names
end

local T = {}

function T.fixture_lists_exactly_the_layers_of_tc_nn()
  local names = {}
  for _, s in ipairs(signatures()) do names[#names + 1] = s.name end
  table.sort(names)
  check.same(tc_layers(), names, "tc.nn layers vs fixture (regenerate tests/fixtures/api/nn_signatures.json)")
end

function T.every_layer_takes_pytorch_positional_arguments_in_order()
  for _, sig in ipairs(signatures()) do
    local ok, e = pcall(function()
      local positional, options, mixed = forms(sig)
      local a = make(sig.name, positional)
      if no_options_form[sig.name] then return end
      same(a, make(sig.name, options), "positional vs options")
      same(a, make(sig.name, mixed), "positional vs mixed")
    end)
    if not ok then error(("nn.%s: %s"):format(sig.name, tostring(e)), 0) end
  end
end

-- Leaving out every optional argument gives the layer that passing PyTorch's defaults gives.
-- Where tc's convention differs the default does too: Flatten's start_dim is 1-based.
function T.defaults_are_pytorchs()
  local convention = {Flatten = {start_dim = 2}}
  for _, sig in ipairs(signatures()) do
    local required, pos, n = {}, {}, 0
    for _, p in ipairs(sig.params) do
      if p.name:sub(1, 1) ~= "*" then
        n = n + 1
        local v
        if p.required then
          v = value_of(sig.name, p.name)
          required[#required + 1] = v
        elseif convention[sig.name] and convention[sig.name][p.name] ~= nil then
          v = convention[sig.name][p.name]
        elseif p.default ~= json.null then
          v = p.default
        end
        pos[n] = v
      end
    end
    local ok, e = pcall(function()
      tc.manual_seed(3)
      local a = nn[sig.name](table.unpack(required))
      tc.manual_seed(3)
      local b = nn[sig.name](table.unpack(pos, 1, n))
      same(a, b, "defaults")
    end)
    if not ok then error(("nn.%s: %s"):format(sig.name, tostring(e)), 0) end
  end
end

-- Every argument tc implements reaches the layer: giving it alone (by name) changes the layer.
-- Not checked: values tc takes only at their default, device "cpu" (the default device) and
-- kdim/vdim equal to embed_dim (what PyTorch's None means).
function T.every_argument_changes_the_layer()
  local only_default = {padding_mode = true, max_norm = true, scale_grad_by_freq = true, sparse = true,
                        return_indices = true, divisor_override = true, add_bias_kv = true,
                        add_zero_attn = true, size_average = true, reduce = true, device = true,
                        kdim = true, vdim = true}
  for _, sig in ipairs(signatures()) do
    local required = {}
    for _, p in ipairs(sig.params) do
      if p.required then required[#required + 1] = value_of(sig.name, p.name) end
    end
    for _, p in ipairs(sig.params) do
      if not p.required and p.name:sub(1, 1) ~= "*" and not only_default[p.name] and not no_options_form[sig.name] then
        local v = value_of(sig.name, p.name)
        if type(p.default) == "boolean" then v = not p.default end
        tc.manual_seed(5)
        local a = nn[sig.name](table.unpack(required))
        tc.manual_seed(5)
        local args = {table.unpack(required)}
        args[#args + 1] = {[p.name] = v}
        local b = nn[sig.name](table.unpack(args))
        if pcall(same, a, b, "") then
          error(("nn.%s: giving %s = %s did not change the layer"):format(sig.name, p.name, check.show(v)), 0)
        end
      end
    end
  end
end

return T
