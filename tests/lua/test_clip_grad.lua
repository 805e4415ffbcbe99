-- tc.nn.utils.clip_grad_norm_ / clip_grad_value_ against torch.nn.utils (fixture:
-- tests/fixtures/train/optim.json from gen_optim.py): gradients after clipping and the returned norm.
local tc = require "tc"
local nn = require "tc.nn"
local check = require "check"
local OF = require "fixtures"

local function with_grads(c, device)
  local ps = {}
  for i, shape in ipairs(OF.optim().params.shapes) do
    ps[i] = tc.zeros(shape):to(device or "cpu")
    ps[i].requires_grad = true
    ps[i].grad = OF.tensor(c.grads_before[i], shape):to(ps[i].device)
  end
  return ps
end

local function every_case(device)
  local n = 0
  for name, c in pairs(OF.optim().clip) do
    local ps = with_grads(c, device)
    local r = nn.utils[c.fn](ps, table.unpack(c.args))
    for i, p in ipairs(ps) do
      OF.assert_close(p.grad:cpu(), OF.tensor(c.grads_after[i], p.shape), ("%s grad %d"):format(name, i))
    end
    if c.total_norm then
      assert(tc.is_tensor(r) and r:dim() == 0, name .. ": the total norm is a 0-dim tensor")
      OF.assert_close(r:cpu(), tc.tensor(c.total_norm), name .. " total norm")
    end
    n = n + 1
  end
  assert(n >= 6, "the fixture has the clip cases")
end

local tests = {}

function tests.every_clip_case_matches_pytorch() every_case("cpu") end

function tests.every_clip_case_matches_pytorch_on_cuda()
  if not tc.cuda.is_available() then check.skip("no CUDA device") end
  every_case("cuda")
end

function tests.clip_grad_norm_skips_params_without_grad_and_takes_one_tensor()
  local c = OF.optim().clip.norm2
  local ps = with_grads(c)
  local lone = ps[2]
  ps[2] = tc.zeros(7)
  local norm = nn.utils.clip_grad_norm_(ps, 1.0)
  assert(ps[2].grad == nil)
  assert(norm:item() < c.total_norm, "the missing gradient does not count")
  local n1 = nn.utils.clip_grad_norm_(lone, 1e9, {norm_type = 1})
  OF.assert_close(n1, lone.grad:abs():sum(), "a lone tensor, norm_type in the options")
  check.eq(nn.utils.clip_grad_norm_({tc.zeros(2)}, 1.0):item(), 0)
end

function tests.clip_grad_norm_error_if_nonfinite()
  local p = tc.zeros(3)
  p.grad = tc.tensor({1, 0 / 0, 2})
  local e = check.raises("ValueError", function() nn.utils.clip_grad_norm_({p}, 1.0, 2, {error_if_nonfinite = true}) end)
  assert(e.message:find("non%-finite"), e.message)
  local norm = nn.utils.clip_grad_norm_({p}, 1.0)
  assert(norm:item() ~= norm:item(), "without the option the nan norm is returned")
end

return tests
