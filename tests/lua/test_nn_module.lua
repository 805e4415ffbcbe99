-- The tc.nn Module API: classes, registration order, dotted 1-based names, state_dict round trips
-- through safetensors files, strict and non-strict loading, train/eval, hooks, conversions.
local tc = require "tc"
local nn = require "tc.nn"

local function tmpname(tag) return os.tmpname() .. "_" .. tag .. ".safetensors" end

local function keys_of(iter_fn)
  local out = {}
  for name in iter_fn do out[#out + 1] = name end
  return out
end

local function same_list(got, want, what)
  local g, w = table.concat(got, ","), table.concat(want, ",")
  if g ~= w then error(("%s: expected {%s}, got {%s}"):format(what, w, g), 2) end
end

local function raises(kind, f)
  local ok, e = pcall(f)
  if ok then error("expected a " .. kind .. ", but the call succeeded", 2) end
  if type(e) ~= "table" or e.kind ~= kind then error(("expected a %s, got %s"):format(kind, tostring(e)), 2) end
  return e
end

-- A small model: a registered block, a list, a buffer, a plain field.
local Block = nn.Module:extend("Block")
function Block:__init(d)
  self.proj = nn.Linear(d, d)
  self.norm = nn.LayerNorm(d)
  self.scale = 2  -- a plain number: not registered
end
function Block:forward(x) return self.norm(self.proj(x)) * self.scale end

local Net = nn.Module:extend("Net")
function Net:__init()
  self.embed = nn.Linear(4, 8)
  self.blocks = nn.ModuleList({Block(8), Block(8)})
  self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 3))
  self:register_buffer("step", tc.zeros(1))
  self:register_buffer("cache", tc.zeros(2), false)  -- non-persistent
  self.gain = nn.Parameter(tc.ones(3))
end
function Net:forward(x)
  x = self.embed(x)
  for _, b in ipairs(self.blocks) do x = b(x) end
  return self.head(x) * self.gain
end

local tests = {}

function tests.named_parameters_order_and_1_based_names()
  local m = Net()
  -- PyTorch's order: a module's own entries before its children's
  same_list(keys_of(m:named_parameters()), {
    "gain", "embed.weight", "embed.bias",
    "blocks.1.proj.weight", "blocks.1.proj.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
    "blocks.2.proj.weight", "blocks.2.proj.bias", "blocks.2.norm.weight", "blocks.2.norm.bias",
    "head.2.weight", "head.2.bias"}, "named_parameters")
  assert(#m:parameters() == 13)
  same_list(keys_of(m:named_buffers()), {"step", "cache"}, "named_buffers")
  same_list(m:state_dict_keys(), {
    "gain", "step", "embed.weight", "embed.bias",
    "blocks.1.proj.weight", "blocks.1.proj.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
    "blocks.2.proj.weight", "blocks.2.proj.bias", "blocks.2.norm.weight", "blocks.2.norm.bias",
    "head.2.weight", "head.2.bias"}, "state_dict keys (non-persistent buffer left out)")
  local sd = m:state_dict()
  assert(sd.cache == nil and sd.step ~= nil)
  for _, p in ipairs(m:parameters()) do assert(p.requires_grad, "parameters require grad") end
end

function tests.children_and_modules()
  local m = Net()
  same_list(keys_of(m:named_children()), {"embed", "blocks", "head"}, "named_children")
  same_list(keys_of(m:named_modules()), {"", "embed", "blocks", "blocks.1", "blocks.1.proj", "blocks.1.norm",
    "blocks.2", "blocks.2.proj", "blocks.2.norm", "head", "head.1", "head.2"}, "named_modules")
  assert(#m:children() == 3 and #m:modules() == 12)
  assert(#m.blocks == 2 and #m.head == 2 and m.head[2] == m.head["2"])
  local visited = 0
  m:apply(function() visited = visited + 1 end)
  assert(visited == 12)
end

function tests.shared_parameters_counted_once()
  local Tied = nn.Module:extend("Tied")
  function Tied:__init()
    self.a = nn.Linear(3, 3)
    self.b = nn.Linear(3, 3)
    self.b.weight = self.a.weight
  end
  local names = keys_of(Tied():named_parameters())
  same_list(names, {"a.weight", "a.bias", "b.bias"}, "tied weight appears once")
end

function tests.only_parameters_register()
  local M = nn.Module:extend("M")
  function M:__init()
    self.w = nn.Parameter(tc.ones(2))
    self.frozen = nn.Parameter(tc.ones(2), false)
    self.plain = tc.ones(2, {requires_grad = true})  -- not a Parameter: not registered (PyTorch too)
    self:register_parameter("extra", tc.zeros(1))
  end
  local m = M()
  same_list(keys_of(m:named_parameters()), {"w", "frozen", "extra"}, "parameters")
  assert(not m.frozen.requires_grad and m.w.requires_grad)
  assert(m:state_dict().plain == nil)
end

function tests.reassigning_keeps_registration_order()
  local M = nn.Module:extend("M")
  function M:__init()
    self.a = nn.Linear(2, 2)
    self.b = nn.Linear(2, 2)
    self.a = nn.Linear(2, 3)
  end
  local m = M()
  same_list(keys_of(m:named_children()), {"a", "b"}, "children")
  assert(m.a.out_features == 3)
end

function tests.class_mechanics()
  local Base = nn.Module:extend("Base")
  function Base:__init(d) self.lin = nn.Linear(d, d) end
  function Base:forward(x) return self.lin(x) end
  local Derived = Base:extend("Derived")
  function Derived:__init(d)
    Derived.super.__init(self, d)
    self.extra = nn.Linear(d, 1)
  end
  function Derived:forward(x) return self.extra(Base.forward(self, x)) end
  local m = Derived(4)
  assert(m(tc.randn(2, 4)).shape == tc.Size({2, 1}))
  same_list(keys_of(m:named_children()), {"lin", "extra"}, "children of a subclass")
  assert(tostring(m):find("^Derived%(") and tostring(m):find("%(lin%): Linear%(in_features=4"), tostring(m))
  local S = nn.Sequential:extend("MySeq")
  local s = S(nn.Linear(2, 2), nn.ReLU())
  assert(#s == 2, "subclasses keep metamethods such as __len")
end

function tests.state_dict_round_trip_through_a_file()
  local a, b = Net(), Net()
  a.step:fill_(5)
  local path = tmpname("net")
  tc.save(path, a:state_dict(), {format = "pt", note = "round trip"})
  local sd, meta = tc.load(path, {map_location = "cpu"})
  os.remove(path)
  assert(meta.note == "round trip" and meta.format == "pt")
  local r = b:load_state_dict(sd)
  assert(#r.missing_keys == 0 and #r.unexpected_keys == 0)
  assert(b.step:item() == 5)
  local x = tc.randn(5, 4)
  assert(a(x):eq(b(x)):all():item(), "same weights, same outputs")
  -- load copies in place: b's parameters are the same objects as before
  local w = b.embed.weight
  b:load_state_dict(Net():state_dict())
  assert(rawequal(w, b.embed.weight))
end

function tests.strict_load_reports_missing_and_unexpected_keys()
  local m = Net()
  local sd = m:state_dict()
  sd["blocks.2.norm.bias"] = nil
  sd["head.2.bias"] = nil
  sd["extra.weight"] = tc.zeros(1)
  local before = m.embed.weight:clone()
  sd["embed.weight"] = tc.zeros(8, 4)
  local line = debug.getinfo(1, "l").currentline + 1
  local e = raises("ValueError", function() m:load_state_dict(sd) end)
  assert(e.line == line, "error at the caller's line " .. line .. ", got " .. tostring(e.line))
  assert(e.message:find('Missing key%(s%) in state_dict: "blocks.2.norm.bias", "head.2.bias"'), e.message)
  assert(e.message:find('Unexpected key%(s%) in state_dict: "extra.weight"'), e.message)
  assert(e.message:find("Error%(s%) in loading state_dict for Net"), e.message)
  assert(m.embed.weight:eq(before):all():item(), "nothing is copied when loading fails")
  -- non-strict: loads what matches, reports the rest
  local r = m:load_state_dict(sd, {strict = false})
  same_list(r.missing_keys, {"blocks.2.norm.bias", "head.2.bias"}, "missing_keys")
  same_list(r.unexpected_keys, {"extra.weight"}, "unexpected_keys")
  assert(m.embed.weight:eq(0):all():item(), "matching keys are loaded")
end

function tests.size_mismatch_is_a_shape_error_even_non_strict()
  local m = nn.Linear(3, 2)
  local e = raises("ShapeError", function() m:load_state_dict({weight = tc.zeros(2, 4), bias = tc.zeros(2)}, {strict = false}) end)
  assert(e.message:find("size mismatch for weight: copying a param with shape %(2, 4%) from checkpoint, the shape in current model is %(2, 3%)"), e.message)
end

function tests.train_eval_switching()
  local m = Net()
  assert(m.training and m.blocks[1].proj.training)
  assert(rawequal(m:eval(), m))
  for _, sub in ipairs(m:modules()) do assert(sub.training == false) end
  m:train()
  for _, sub in ipairs(m:modules()) do assert(sub.training == true) end
  m:train(false)
  assert(not m.head[1].training)
  local d = nn.Sequential(nn.Dropout(0.9))
  d:eval()
  assert(d(tc.ones(100)):eq(1):all():item(), "dropout is the identity in eval mode")
end

function tests.forward_hooks()
  local m = nn.Linear(3, 3)
  local seen
  local h1 = m:register_forward_pre_hook(function(mod, args)
    seen = mod
    return {args[1] * 0}
  end)
  local h2 = m:register_forward_hook(function(_, args, out)
    assert(args[1]:eq(0):all():item(), "forward hook sees the arguments forward got")
    return out + 1
  end)
  local y = m(tc.randn(2, 3))
  assert(seen == m)
  assert((y - 1 - m.bias):abs():amax():item() < 1e-6)
  h1.remove()
  h2.remove()
  local x = tc.randn(2, 3)
  assert(m(x):eq(m:forward(x)):all():item(), "removed hooks no longer run")
end

function tests.conversions_keep_registration()
  local m = Net()
  m:double()
  for name, p in m:named_parameters() do
    assert(p.dtype == tc.float64, name .. " is float64")
    assert(p.requires_grad, name .. " still requires grad")
  end
  assert(m.step.dtype == tc.float64)
  assert(m(tc.randn(2, 4, {dtype = tc.float64})).dtype == tc.float64)
  m:to(tc.float32)
  assert(m.embed.weight.dtype == tc.float32)
  m:float()
  same_list(keys_of(m:named_parameters()), keys_of(Net():named_parameters()), "names after conversions")
  local bn = nn.BatchNorm1d(3):double()
  assert(bn.num_batches_tracked.dtype == tc.int64, "integer buffers are not converted")
end

function tests.zero_grad_and_compile()
  local m = Net()
  for _, p in ipairs(m:parameters()) do p.grad = tc.ones_like(p) end
  m:zero_grad()
  for _, p in ipairs(m:parameters()) do assert(p.grad == nil) end
  local x = tc.randn(3, 4)
  local y = m(x)
  assert(rawequal(m:compile(), m))
  -- compiled: its tiny Linear layers are generated reductions, summed in another order than
  -- BLAS, so equal within DESIGN.md §4 (float32), not bit-equal
  local got = m(x)
  assert(got:allclose(y, 1e-5, 1e-6), "compiled forward matches eager: " .. (got - y):abs():max():item())
end

function tests.from_torch_state_dict_renames_list_positions()
  local t = tc.zeros(1)
  local sd = tc.utils.from_torch_state_dict({["layers.0.weight"] = t, ["h.10.attn.c_attn.bias"] = t,
    ["features.denseblock1.denselayer10.conv1.weight"] = t, ["downsample.1.running_mean"] = t, fc = t})
  local names = {}
  for k in pairs(sd) do names[#names + 1] = k end
  table.sort(names)
  same_list(names, {"downsample.2.running_mean", "fc", "features.denseblock1.denselayer10.conv1.weight",
    "h.11.attn.c_attn.bias", "layers.1.weight"}, "renamed keys")
  assert(rawequal(sd["layers.1.weight"], t), "tensors are not copied")
  local back = tc.utils.to_torch_state_dict(sd)
  assert(back["layers.0.weight"] and back["h.10.attn.c_attn.bias"] and back["downsample.1.running_mean"])
  raises("ValueError", function() tc.utils.to_torch_state_dict({["a.0.b"] = t}) end)
end

function tests.loads_a_pytorch_sequential_checkpoint()
  -- parity/layers.safetensors holds PyTorch state_dicts; a Sequential of them loads after renaming
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
  local all = tc.load(here .. "/../fixtures/parity/layers.safetensors")
  local sd = {}
  for k, v in pairs(all) do
    local key = k:match("^linear/p/(.*)$")
    if key then sd["0." .. key] = v end
  end
  local seq = nn.Sequential(nn.Linear(5, 3))
  seq:load_state_dict(tc.utils.from_torch_state_dict(sd))
  assert(seq[1].weight:eq(all["linear/p/weight"]):all():item())
end

function tests.containers()
  local seq = nn.Sequential()
  seq:add(nn.Linear(2, 3)):add(nn.ReLU())
  seq:add_module("out", nn.Linear(3, 1))
  same_list(keys_of(seq:named_children()), {"1", "2", "out"}, "Sequential children")
  assert(#seq == 3 and seq[3] == seq.out, "named children are also positional")
  assert(seq(tc.randn(4, 2)).shape == tc.Size({4, 1}))
  local d = nn.ModuleDict({b = nn.Linear(2, 2), a = nn.Tanh()})
  same_list(keys_of(d:named_children()), {"a", "b"}, "ModuleDict children (sorted keys)")
  assert(d.b.in_features == 2)
  local l = nn.ModuleList()
  l:append(nn.Linear(1, 1)):append(nn.Linear(1, 2))
  local n = 0
  for i, m in ipairs(l) do n = n + 1; assert(m.out_features == i) end
  assert(n == 2 and #l == 2)
  same_list(keys_of(l:named_parameters()), {"1.weight", "1.bias", "2.weight", "2.bias"}, "ModuleList names")
end

function tests.errors_inside_layers_point_at_the_callers_line()
  local m = nn.Sequential(nn.Linear(3, 4))
  local line = debug.getinfo(1, "l").currentline + 1
  local e = raises("ShapeError", function() return m(tc.randn(2, 5)) end)
  assert(e.line == line, ("expected line %d, got %s (%s)"):format(line, tostring(e.line), e.message))
  assert(e.message:find("2x5 and 3x4") or e.message:find("cannot be multiplied"), e.message)
end

return tests
