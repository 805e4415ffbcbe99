-- tc.optim against torch.optim (fixtures: tests/fixtures/gen_nn_parity.py ->
-- tests/fixtures/parity/optim.safetensors): two parameters, three steps with hand-set gradients,
-- the parameters after each step compared with PyTorch's.
local tc = require "tc"
local optim = require "tc.optim"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local FIXTURE = here .. "/../fixtures/parity/optim.safetensors"
local fx
local function F() fx = fx or tc.load(FIXTURE); return fx end

-- mirrors OPT_CASES of the generator
local cases = {
  sgd = {"SGD", {lr = 0.1}},
  sgd_momentum = {"SGD", {lr = 0.1, momentum = 0.9}},
  sgd_dampening_wd = {"SGD", {lr = 0.05, momentum = 0.8, dampening = 0.3, weight_decay = 0.1}},
  sgd_nesterov_wd = {"SGD", {lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01}},
  sgd_maximize = {"SGD", {lr = 0.1, momentum = 0.5, maximize = true}},
  adam = {"Adam", {lr = 0.01}},
  adam_wd_betas = {"Adam", {lr = 0.02, betas = {0.8, 0.99}, eps = 1e-6, weight_decay = 0.1}},
  adam_amsgrad = {"Adam", {lr = 0.01, amsgrad = true}},
  adamw = {"AdamW", {lr = 0.01}},
  adamw_wd_amsgrad = {"AdamW", {lr = 0.05, weight_decay = 0.3, amsgrad = true}},
}

local function assert_close(got, want, what)
  local diff = (got:double() - want:double()):abs()
  local excess = (diff - (want:double():abs() * 1e-5 + 1e-6)):amax():item()
  if excess > 0 or excess ~= excess then
    error(("%s: max |difference| %.3g"):format(what, diff:amax():item()), 2)
  end
end

local function params()
  local ps = {}
  for i = 1, 2 do
    ps[i] = F()["init/" .. i]:clone()
    ps[i].requires_grad = true
  end
  return ps
end

local function set_grads(ps, step)
  for i, p in ipairs(ps) do p.grad = F()["grad/" .. step .. "/" .. i]:clone() end
end

local tests = {}
for name, c in pairs(cases) do
  tests["parity_" .. name] = function()
    local ps = params()
    local opt = optim[c[1]](ps, c[2])
    for step = 1, 3 do
      set_grads(ps, step)
      opt:step()
      for i, p in ipairs(ps) do
        assert_close(p, F()[name .. "/step" .. step .. "/" .. i], ("%s step %d param %d"):format(name, step, i))
      end
    end
  end
end

function tests.every_fixture_case_is_tested()
  for key in pairs(F()) do
    local name = key:match("^([^/]+)/step")
    if name then assert(cases[name], "fixture case " .. name .. " has no Lua test") end
  end
end

function tests.zero_grad_sets_grads_to_nil_and_step_skips_them()
  local ps = params()
  local opt = optim.SGD(ps, {lr = 0.1, momentum = 0.9})
  set_grads(ps, 1)
  opt:zero_grad()
  assert(ps[1].grad == nil and ps[2].grad == nil)
  local before = ps[1]:clone()
  opt:step()
  assert(ps[1]:eq(before):all():item(), "a parameter without grad is left alone")
end

function tests.step_updates_in_place()
  local ps = params()
  local opt = optim.Adam(ps)
  local p1 = ps[1]
  set_grads(ps, 1)
  opt:step()
  assert(rawequal(ps[1], p1) and p1.requires_grad, "the parameter object is the same leaf tensor")
end

-- Two steps, state_dict into a fresh optimizer, the third step matches the uninterrupted run.
function tests.state_dict_round_trip_resumes_exactly()
  for _, name in ipairs {"sgd_nesterov_wd", "adam_amsgrad", "adamw"} do
    local c = cases[name]
    local ps = params()
    local opt = optim[c[1]](ps, c[2])
    for step = 1, 2 do set_grads(ps, step); opt:step() end
    local sd = opt:state_dict()
    local opt2 = optim[c[1]](ps, {lr = 123})
    opt2:load_state_dict(sd)
    assert(opt2.param_groups[1].lr == c[2].lr, "hyper-parameters come back")
    set_grads(ps, 3)
    opt2:step()
    for i, p in ipairs(ps) do assert_close(p, F()[name .. "/step3/" .. i], name .. " resumed param " .. i) end
  end
end

-- Parameter groups with their own options: group 1 plain SGD, group 2 with momentum.
function tests.param_groups_have_their_own_options()
  local ps = params()
  local opt = optim.SGD({{params = {ps[1]}}, {params = {ps[2]}, momentum = 0.9}}, {lr = 0.1})
  assert(#opt.param_groups == 2 and opt.param_groups[2].lr == 0.1 and opt.param_groups[1].momentum == 0)
  for step = 1, 3 do
    set_grads(ps, step)
    opt:step()
  end
  assert_close(ps[1], F()["sgd/step3/1"], "group 1 (sgd)")
  assert_close(ps[2], F()["sgd_momentum/step3/2"], "group 2 (momentum 0.9)")
  local ok, e = pcall(opt.add_param_group, opt, {params = {ps[1]}})
  assert(not ok and e.kind == "ValueError" and e.message:find("more than one parameter group"), tostring(e))
  local q = tc.zeros(2)
  opt:add_param_group({params = {q}, lr = 0.5})
  assert(opt.param_groups[3].lr == 0.5 and opt.param_groups[3].momentum == 0)
  ok, e = pcall(optim.Adam, {{params = {ps[1]}, betas = {0.9, 1.5}}})
  assert(not ok and e.kind == "ValueError" and e.message:find("invalid betas"), tostring(e))
end

function tests.bad_options_raise_value_errors()
  local ps = params()
  local function raises(f, pattern)
    local ok, e = pcall(f)
    assert(not ok and type(e) == "table" and e.kind == "ValueError", "expected a ValueError, got " .. tostring(e))
    assert(e.message:find(pattern), e.message)
  end
  raises(function() return optim.SGD(ps, {lr = 0.1, nesterov = true}) end, "nesterov")
  raises(function() return optim.SGD(ps, {lr = -1}) end, "invalid learning rate")
  raises(function() return optim.Adam(ps, {betas = {1.0, 0.9}}) end, "invalid beta")
  raises(function() return optim.Adam(ps, {lrr = 0.1}) end, "unknown option 'lrr'")
  raises(function() return optim.AdamW({}, {}) end, "empty parameter list")
end

return tests
