-- tc.optim against torch.optim (fixture: tests/fixtures/train/optim.json from gen_optim.py): three
-- parameters, several steps with hand-set gradients (some cases leave grads unset at some steps),
-- the parameters after every step compared with PyTorch's; every case runs parameter by parameter
-- (foreach=false), on the flat buckets (foreach=true) and through the fused ops (fused=true:
-- tc._fused_adam_ ...), which must also equal the per-parameter path on mixed shapes and run as
-- one graph node inside compiled functions.
local tc = require "tc"
local optim = require "tc.optim"
local check = require "check"
local OF = require "fixtures"

local function P() return OF.optim().params end

local function params(device)
  local ps = {}
  for i, shape in ipairs(P().shapes) do
    ps[i] = OF.tensor(P().init[i], shape):to(device or "cpu")
    ps[i].requires_grad = true
  end
  return ps
end

-- Gradients of (1-based) step `step`; with skip, the fixture's params.skip ones stay nil.
local function set_grads(ps, step, skip)
  local none = {}
  for _, i in ipairs(skip and P().skip[tostring(step)] or {}) do none[i] = true end
  for i, p in ipairs(ps) do
    p.grad = not none[i] and OF.tensor(P().grads[step][i], P().shapes[i]):to(p.device) or nil
  end
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

-- The optimizer of fixture case c over ps, with extra options.
local function build(c, ps, extra)
  local opts = copy(c.options)
  for k, v in pairs(extra or {}) do opts[k] = v end
  if c.groups then
    local spec = {}
    for gi, g in ipairs(c.groups) do
      spec[gi] = copy(g.options or {})
      spec[gi].params = {}
      for _, i in ipairs(g.params) do table.insert(spec[gi].params, ps[i]) end
    end
    return optim[c.class](spec, opts)
  end
  return optim[c.class](ps, opts)
end

-- foreach: true/false/nil, or a table of options (mode = {fused = true})
local function run_case(name, c, foreach, from_step, ps, opt, device)
  ps = ps or params(device)
  local mode = type(foreach) == "table" and foreach or {foreach = foreach}
  opt = opt or build(c, ps, mode)
  for step = from_step or 1, #c.steps do
    set_grads(ps, step, c.skip)
    opt:step()
    for i, p in ipairs(ps) do
      OF.assert_close(p:cpu(), OF.tensor(c.steps[step][i], P().shapes[i]),
        ("%s (foreach=%s, fused=%s) step %d param %d"):format(name, tostring(mode.foreach), tostring(mode.fused), step, i))
    end
  end
  return ps, opt
end

local tests = {}

function tests.every_optimizer_case_matches_pytorch_per_parameter()
  local n = 0
  for name, c in pairs(OF.optim().optimizers) do run_case(name, c, false); n = n + 1 end
  assert(n >= 20, "the fixture has the optimizer cases")
end

function tests.every_optimizer_case_matches_pytorch_on_flat_buckets()
  for name, c in pairs(OF.optim().optimizers) do run_case(name, c, true) end
end

function tests.every_optimizer_case_matches_pytorch_fused()
  for name, c in pairs(OF.optim().optimizers) do run_case(name, c, {fused = true}) end
end

-- On CUDA the default (fused = nil, foreach = nil) is the fused path; skipped without a GPU.
function tests.every_optimizer_case_matches_pytorch_on_cuda()
  if not tc.cuda.is_available() then check.skip("no CUDA device") end
  for name, c in pairs(OF.optim().optimizers) do
    run_case(name, c, nil, nil, nil, nil, "cuda")
    run_case(name, c, true, nil, nil, nil, "cuda")
  end
  local ps = params("cuda")
  assert(optim.Adam(ps).param_groups[1].fused == nil, "nil by default")
end

function tests.fixture_covers_every_optimizer_class()
  local seen = {}
  for _, c in pairs(OF.optim().optimizers) do seen[c.class] = true end
  for _, cls in ipairs {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad"} do assert(seen[cls], cls .. " has no fixture case") end
end

-- The flat path really is one bucket per group: state tensors of a group's parameters are views
-- of one buffer, and after a foreach step the per-parameter view shows the new state.
function tests.state_tensors_are_views_of_one_flat_buffer_per_group()
  local ps = params()
  local opt = optim.Adam(ps, {lr = 0.01, foreach = true})
  set_grads(ps, 1)
  opt:step()
  local b = opt._slot[ps[1]].bucket
  assert(opt._slot[ps[2]].bucket == b and opt._slot[ps[3]].bucket == b, "one bucket for the group")
  check.eq(b.buffers.exp_avg:numel(), 12 + 5 + 6)
  check.same(opt.state[ps[2]].exp_avg.shape, {5})
  OF.assert_close(opt.state[ps[2]].exp_avg, b.buffers.exp_avg:narrow(1, 13, 5), "view of the flat buffer")
  check.eq(opt.state[ps[3]].step, 1)
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
  assert(next(opt.state) == nil, "no state for parameters that never had a gradient")
end

function tests.zero_grad_set_to_none_false_zeroes_in_place()
  local ps = params()
  local opt = optim.SGD(ps, {lr = 0.1})
  set_grads(ps, 1)
  local g = ps[1].grad
  opt:zero_grad({set_to_none = false})
  assert(rawequal(ps[1].grad, g), "the same gradient tensor")
  check.eq(g:abs():sum():item(), 0)
  opt:zero_grad({set_to_none = true})
  assert(ps[1].grad == nil)
end

function tests.step_updates_in_place()
  local ps = params()
  local opt = optim.Adam(ps, {foreach = true})
  local p1 = ps[1]
  set_grads(ps, 1)
  opt:step()
  assert(rawequal(ps[1], p1) and p1.requires_grad, "the parameter object is the same leaf tensor")
end

function tests.step_calls_the_closure_and_returns_its_loss()
  local ps = params()
  local opt = optim.SGD(ps, {lr = 0.1})
  local calls = 0
  local loss = opt:step(function() calls = calls + 1; set_grads(ps, 1); return 42 end)
  check.eq(calls, 1)
  check.eq(loss, 42)
  OF.assert_close(ps[1], OF.tensor(OF.optim().optimizers.sgd.steps[1][1], P().shapes[1]), "stepped with the closure's grads")
end

-- Two steps, state_dict into a fresh optimizer (other lr), the rest matches the uninterrupted run.
function tests.state_dict_round_trip_resumes_exactly()
  for _, name in ipairs {"sgd_nesterov_wd", "adam_amsgrad", "adamw", "rmsprop_centered_momentum", "adagrad_decay_wd_init",
                         "adam_skip", "groups_adam"} do
    local c = OF.optim().optimizers[name]
    for _, mode in ipairs {{foreach = false}, {foreach = true}, {fused = true}} do
      local ps = params()
      local opt = build(c, ps, mode)
      for step = 1, 2 do set_grads(ps, step, c.skip); opt:step() end
      local sd = opt:state_dict()
      local opt2 = build(c, ps, {lr = 123, foreach = mode.foreach, fused = mode.fused})
      opt2:load_state_dict(sd)
      check.eq(opt2.param_groups[1].lr, opt.param_groups[1].lr, "hyper-parameters come back")
      -- the saved state is a copy: stepping the old optimizer does not change it
      set_grads(ps, 3, c.skip)
      local keep = {}
      for i, p in ipairs(ps) do keep[i] = p:clone() end
      opt:step()
      for i, p in ipairs(ps) do p:detach():copy_(keep[i]) end
      run_case(name, c, mode, 3, ps, opt2)
    end
  end
end

function tests.load_state_dict_rejects_mismatched_state()
  local ps = params()
  local opt = optim.Adam(ps, {lr = 0.01})
  set_grads(ps, 1)
  opt:step()
  local sd = opt:state_dict()
  sd.state[2].exp_avg = tc.zeros(4)
  local e = check.raises("ValueError", function() optim.Adam(params()):load_state_dict(sd) end)
  assert(e.message:find("state 'exp_avg' of parameter 2 has shape %(4,%), the parameter has shape %(5,%)"), e.message)
  sd = opt:state_dict()
  sd.state[1].exp_avg_sq = nil
  e = check.raises("ValueError", function() optim.Adam(params()):load_state_dict(sd) end)
  assert(e.message:find("parameter 1 has no tensor 'exp_avg_sq'"), e.message)
  e = check.raises("ValueError", function() optim.Adam({ps[1], ps[2]}):load_state_dict(opt:state_dict()) end)
  assert(e.message:find("has 3 parameters, the optimizer's 2"), e.message)
  e = check.raises("ValueError", function() optim.Adam({{params = {ps[1]}}, {params = {ps[2], ps[3]}}}):load_state_dict(opt:state_dict()) end)
  assert(e.message:find("1 parameter groups, the optimizer 2"), e.message)
  -- the saved group options win: a plain Adam state loads into an amsgrad one, which becomes plain
  local opt2 = optim.Adam(params(), {amsgrad = true})
  opt2:load_state_dict(opt:state_dict())
  check.eq(opt2.param_groups[1].amsgrad, false)
end

-- Parameter groups with their own options; add_param_group checks duplicates and options.
function tests.param_groups_have_their_own_options()
  local ps = params()
  local opt = optim.SGD({{params = {ps[1]}}, {params = {ps[2]}, momentum = 0.9}}, {lr = 0.1})
  assert(#opt.param_groups == 2 and opt.param_groups[2].lr == 0.1 and opt.param_groups[1].momentum == 0)
  local e = check.raises("ValueError", function() opt:add_param_group({params = {ps[1]}}) end)
  assert(e.message:find("more than one parameter group"), e.message)
  opt:add_param_group({params = {ps[3]}, lr = 0.5})
  assert(opt.param_groups[3].lr == 0.5 and opt.param_groups[3].momentum == 0)
  for step = 1, 2 do set_grads(ps, step); opt:step() end
  local fx = OF.optim().optimizers
  OF.assert_close(ps[1], OF.tensor(fx.sgd.steps[2][1], P().shapes[1]), "group 1 (sgd)")
  OF.assert_close(ps[2], OF.tensor(fx.sgd_momentum.steps[2][2], P().shapes[2]), "group 2 (momentum 0.9)")
  e = check.raises("ValueError", function() optim.Adam({{params = {ps[1]}, betas = {0.9, 1.5}}}) end)
  assert(e.message:find("invalid betas"), e.message)
end

function tests.bad_options_raise_value_errors()
  local ps = params()
  local function raises(f, pattern)
    local e = check.raises("ValueError", f)
    assert(e.message:find(pattern), e.message)
  end
  raises(function() return optim.SGD(ps, {lr = 0.1, nesterov = true}) end, "nesterov")
  raises(function() return optim.SGD(ps, {lr = -1}) end, "invalid learning rate")
  raises(function() return optim.SGD(ps, {momentum = -1}) end, "invalid momentum")
  raises(function() return optim.Adam(ps, {betas = {1.0, 0.9}}) end, "invalid beta")
  raises(function() return optim.Adam(ps, {lrr = 0.1}) end, "unknown option 'lrr'")
  raises(function() return optim.Adam(ps, {eps = -1}) end, "invalid epsilon")
  raises(function() return optim.RMSprop(ps, {alpha = -0.5}) end, "invalid alpha")
  raises(function() return optim.Adagrad(ps, {lr_decay = -0.5}) end, "invalid lr_decay")
  raises(function() return optim.AdamW(ps, {weight_decay = -1}) end, "invalid weight_decay")
  raises(function() return optim.AdamW({}, {}) end, "empty parameter list")
  raises(function() return optim.SGD({ps[1], ps[2], ps[1]}) end, "parameter 3 appears twice in one parameter group")
  raises(function() return optim.SGD(ps, {foreach = "yes"}) end, "foreach must be true, false or nil")
  raises(function() return optim.SGD(ps, {fused = 1}) end, "fused must be true, false or nil")
  raises(function() return optim.Adam(ps, {fused = true, foreach = true}) end, "fused=true and foreach=true cannot be used together")
end

function tests.printing_an_optimizer_shows_its_groups()
  local ps = params()
  local text = tostring(optim.Adam({{params = {ps[1]}}, {params = {ps[2]}, lr = 0.5}}, {lr = 0.01}))
  assert(text:find("^Adam %(\nParameter Group 1\n    amsgrad: false\n    betas: {0.9, 0.999}\n"), text)
  assert(text:find("Parameter Group 2\n[^)]*    lr: 0.5\n"), text)
end

-- Options changed between steps take effect: momentum switched on later gets its buffer.
function tests.options_changed_between_steps_take_effect()
  for _, mode in ipairs {{foreach = false}, {foreach = true}, {fused = true}} do
    local ps = params()
    local opt = optim.RMSprop(ps, {lr = 0.01, foreach = mode.foreach, fused = mode.fused})
    set_grads(ps, 1)
    opt:step()
    assert(opt.state[ps[1]].momentum_buffer == nil)
    opt.param_groups[1].momentum = 0.9
    opt.param_groups[1].lr = 0.02
    set_grads(ps, 2)
    opt:step()
    check.same(opt.state[ps[3]].momentum_buffer.shape, {2, 1, 3})
    assert(opt.state[ps[3]].momentum_buffer:abs():sum():item() > 0, "the new buffer was used")
  end
end

-- A parameter of another dtype gets its own bucket; foreach still matches per-parameter results.
function tests.mixed_dtypes_get_separate_buckets()
  local results = {}
  for _, foreach in ipairs {false, true} do
    local ps = params()
    ps[2] = ps[2]:double()
    ps[2].requires_grad = true
    local opt = optim.Adam(ps, {lr = 0.01, foreach = foreach})
    for step = 1, 3 do
      for i, p in ipairs(ps) do p.grad = OF.tensor(P().grads[step][i], P().shapes[i]):to(p.dtype) end
      opt:step()
    end
    if foreach then assert(opt._slot[ps[1]].bucket ~= opt._slot[ps[2]].bucket, "one bucket per dtype") end
    results[foreach] = ps
  end
  for i = 1, 3 do OF.assert_close(results[true][i], results[false][i], "param " .. i) end
  check.eq(results[true][2].dtype, tc.float64)
end

-- ---- fused ------------------------------------------------------------------------------------
-- Mixed shapes (an empty parameter, one of several chunks, a transposed one with a transposed
-- grad), gradients missing at some steps (those parameters fall a step behind: one fused call per
-- step count), every class with its options on: fused equals per parameter, step by step.
function tests.fused_equals_per_parameter_on_mixed_shapes_and_missing_grads()
  local shapes = {{3, 4}, {0}, {70000}, {5}, {4, 6}, {2, 1, 3}}
  tc.manual_seed(3)
  local init, grads = {}, {}
  for i, s in ipairs(shapes) do init[i] = tc.randn(s) end
  for step = 1, 4 do
    grads[step] = {}
    for i, s in ipairs(shapes) do grads[step][i] = tc.randn(s) end
  end
  local missing = {[2] = {[4] = true}, [3] = {[4] = true, [6] = true}}
  local cases = {
    {"SGD", {lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01}}, {"SGD", {lr = 0.1, dampening = 0.2, momentum = 0.5, maximize = true}},
    {"SGD", {lr = 0.1}}, {"Adam", {lr = 0.01, amsgrad = true, weight_decay = 0.1}}, {"Adam", {lr = 0.01, maximize = true}},
    {"AdamW", {lr = 0.01, betas = {0.8, 0.99}}}, {"AdamW", {lr = 0.05, weight_decay = 0.3, amsgrad = true}},
    {"RMSprop", {lr = 0.01, centered = true, momentum = 0.5, weight_decay = 0.1}}, {"RMSprop", {lr = 0.01, alpha = 0.9}},
    {"Adagrad", {lr = 0.1, lr_decay = 0.05, weight_decay = 0.1, initial_accumulator_value = 0.2}},
  }
  for _, c in ipairs(cases) do
    local results = {}
    for _, fused in ipairs {false, true} do
      local ps = {}
      for i, t in ipairs(init) do
        ps[i] = i == 5 and t:t():contiguous():t() or t:clone()  -- 5: a non-contiguous parameter
        ps[i].requires_grad = true
      end
      local opts = copy(c[2])
      opts.fused = fused
      local opt = optim[c[1]](ps, opts)
      for step = 1, 4 do
        for i, p in ipairs(ps) do
          local g = grads[step][i]
          if i == 5 then g = g:t():contiguous():t() end
          p.grad = not (missing[step] or {})[i] and g or nil
        end
        opt:step()
      end
      results[fused] = ps
    end
    for i = 1, #shapes do
      if i == 2 then
        check.same(results[true][i].shape, {0})
      else
        OF.assert_close(results[true][i], results[false][i], ("%s %s param %d"):format(c[1], tostring(c[2].lr), i))
      end
    end
  end
end

function tests.fused_ops_check_their_arguments()
  local p, g = tc.ones(3), tc.ones(3)
  local function raises(kind, pattern, f)
    local e = check.raises(kind, f)
    assert(e.message:find(pattern), e.message)
  end
  raises("ValueError", "exp_avg_sqs has 0 tensors, params has 1",
    function() tc._fused_adam_({p}, {g}, {tc.zeros(3)}, {}, {}, 1, {lr = 0.1}) end)
  raises("ValueError", "max_exp_avg_sqs has 0 tensors, params has 1",
    function() tc._fused_adamw_({p}, {g}, {tc.zeros(3)}, {tc.zeros(3)}, {}, 1, {lr = 0.1, amsgrad = true}) end)
  raises("DTypeError", "but grads%[1%] is float64", function() tc._fused_sgd_({p}, {g:double()}, {}, {lr = 0.1}) end)
  raises("ShapeError", "momentum_buffers%[1%] has shape %[4%], params%[1%] has shape %[3%]",
    function() tc._fused_sgd_({p}, {g}, {tc.zeros(4)}, {lr = 0.1, momentum = 0.9}) end)
  raises("ValueError", "expected at least one parameter", function() tc._fused_adagrad_({}, {}, {}, 1, {lr = 0.1}) end)
  raises("ValueError", "missing required argument 'lr'", function() tc._fused_rmsprop_({p}, {g}, {tc.zeros(3)}, {}, {}) end)
  local leaf = tc.ones(3)
  leaf.requires_grad = true
  raises("ValueError", "leaf tensor that requires grad is being used in an in%-place operation",
    function() tc._fused_sgd_({leaf}, {g}, {}, {lr = 0.1}) end)
  tc.no_grad(function() tc._fused_sgd_({leaf}, {g}, {}, {lr = 0.5}) end)
  check.eq(leaf:sum():item(), 1.5)
end

-- lr is ops.def's float|Tensor: a number, or a 0-dim tensor read as it is (the same step);
-- anything else is refused naming the argument.
function tests.fused_ops_take_lr_as_a_number_or_a_0_dim_tensor()
  local function step(lr)
    local p = tc.tensor({1, 2, 3}, {dtype = tc.float32})
    tc._fused_sgd_({p}, {tc.tensor({1, 1, 2}, {dtype = tc.float32})}, {}, {lr = lr})
    return p
  end
  check.same(step(tc.tensor(0.5)):tolist(), step(0.5):tolist())
  check.same(step(tc.tensor(0.5, {dtype = tc.float64})):tolist(), step(0.5):tolist())
  local e = check.raises("ValueError", function() step(tc.tensor({0.5})) end)
  assert(e.message:find("argument 'lr' must be a number or a 0-dim tensor, not a tensor of shape [1]", 1, true), e.message)
  e = check.raises("ValueError", function() step("fast") end)
  assert(e.message:find("argument 'lr' must be float|Tensor, not string", 1, true), e.message)
end

-- Inside a compiled function the fused op is one graph node; the eager backend and the code
-- generators (cpu; cuda with a GPU: an extern call of the op) give eager's results, written into
-- the parameters.
function tests.fused_op_is_one_graph_node_under_compile()
  local function run(backend, device)
    tc.manual_seed(5)
    local ps, gs, ms, vs = {}, {}, {}, {}
    for i, s in ipairs {{3, 4}, {5}, {0}} do
      ps[i], gs[i] = tc.randn(s):to(device), tc.randn(s):to(device)
      ms[i], vs[i] = tc.zeros(s, {device = device}), tc.zeros(s, {device = device})
    end
    local function step(k)
      local y = ps[1] * 2  -- read before the update
      -- lists made in the trace, as tc.optim makes them (capture does not take real arrays of
      -- tensors as op arguments yet)
      local P, G, M, V = {}, {}, {}, {}
      for i = 1, #ps do P[i], G[i], M[i], V[i] = ps[i], gs[i], ms[i], vs[i] end
      tc._fused_adam_(P, G, M, V, {}, k, {lr = 0.1, weight_decay = 0.1})
      return y + ps[1]  -- read after it
    end
    local listing, outs = {}, {}
    local f = step
    if backend == "lua" then
      f = tc.compile(step, {backend = function(gm) listing[#listing + 1] = gm.code
        return function(...) return gm:forward(...) end
      end})
    elseif backend then
      f = tc.compile(step, {backend = backend})
    end
    for k = 1, 3 do outs[k] = f(k) end
    return ps, ms, outs, listing
  end
  local ps0, ms0, outs0 = run(nil, "cpu")
  local cases = {{"lua", "cpu"}, {"eager", "cpu"}, {"cpu", "cpu"}}
  if tc.cuda.is_available() then cases[4], cases[5] = {"eager", "cuda"}, {"cuda", "cuda"} end
  for _, c in ipairs(cases) do
    local ps, ms, outs, listing = run(c[1], c[2])
    local what = c[1] .. " on " .. c[2]
    for i = 1, 2 do
      OF.assert_close(ps[i]:cpu(), ps0[i], what .. " param " .. i)
      OF.assert_close(ms[i]:cpu(), ms0[i], what .. " exp_avg " .. i)
    end
    for k = 1, 3 do OF.assert_close(outs[k]:cpu(), outs0[k], what .. " result of call " .. k) end
    if c[1] == "lua" then  -- one _fused_adam_ node in each graph
      local code = table.concat(listing, "\n")
      check.eq(select(2, code:gsub("_fused_adam_%(", "")), #listing, code)
    end
  end
end

return tests
