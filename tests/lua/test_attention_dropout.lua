-- scaled_dot_product_attention with dropout_p > 0 (eager, autograd; tc.compile is in
-- tests/capture/attention_dropout_compiles_and_draws_eagers_mask.lua): the attention probabilities are
-- zeroed with probability p and the rest scaled by 1/(1-p), drawn from tc's random stream as the
-- decomposition softmax -> dropout -> matmul draws them, so a seed fixes the mask.
local tc = require "tc"
local check = require "check"
local T = {}

local function sdpa(q, k, v, p, causal) return tc.scaled_dot_product_attention(q, k, v, nil, p, causal or false) end

-- The decomposition, written out: what sdpa with dropout must equal under the same seed.
local function by_hand(q, k, v, p)
  local probs = (q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(q.shape[q:dim()]))):softmax(-1)
  return tc.dropout(probs, p, true):matmul(v)
end

local function max_diff(a, b) return (a:double() - b:double()):abs():amax():item() end

local function rnd(...) return tc.randn({...}, {dtype = tc.float64}) end

-- q = k = 0: every probability is 1/S; v = identity [S, S]: the output is the dropped-out
-- probabilities themselves. About p of them are 0, the others 1/(S (1-p)), the mean stays 1/S.
function T.dropout_zeroes_about_p_of_the_probabilities_and_keeps_their_mean()
  local B, L, S, p = 8, 64, 64, 0.3
  for _, dtype in ipairs {tc.float32, tc.float64} do
    tc.manual_seed(5)
    local q = tc.zeros({B, L, 16}, {dtype = dtype})
    local v = tc.eye(S, {dtype = dtype}):expand(B, S, S)
    local out = sdpa(q, q:narrow(2, 1, S), v, p):double()
    check.same(out.shape, {B, L, S})
    local n = out:numel()
    local zeros = (out:eq(0)):sum():item()
    local kept = 1 / (S * (1 - p))
    check.eq((out:ne(0) * (out - kept):abs()):amax():item() < 1e-6 * kept, true, "kept values are 1/(S (1-p))")
    local frac = zeros / n
    -- n = 32768 draws: the fraction's standard deviation is 0.0025; 0.02 is 8 of them
    check.eq(math.abs(frac - p) < 0.02, true, ("fraction of zeros %g, p %g"):format(frac, p))
    local mean = out:mean():item()
    check.eq(math.abs(mean - 1 / S) < 0.03 / S, true, ("mean %g, expected %g"):format(mean, 1 / S))
  end
end

function T.dropout_mask_is_fixed_by_manual_seed()
  tc.manual_seed(1)
  local q, k, v = rnd(2, 5, 4), rnd(2, 6, 4), rnd(2, 6, 3)
  tc.manual_seed(42)
  local a = sdpa(q, k, v, 0.5)
  tc.manual_seed(42)
  local b = sdpa(q, k, v, 0.5)
  local c = sdpa(q, k, v, 0.5)  -- the stream moved on: another mask
  check.eq(max_diff(a, b), 0, "the same seed, the same result")
  check.eq(max_diff(a, c) > 0, true, "a later call draws another mask")
end

-- Without autograd (the kernel), with autograd (the forward runs as the decomposition) and the
-- decomposition written out all draw the same mask from the same seed; masks, causal and
-- broadcast batch dims included.
function T.dropout_forward_equals_the_decomposition_with_the_same_seed()
  tc.manual_seed(2)
  local q, k, v = rnd(2, 3, 5, 4), rnd(1, 3, 6, 4), rnd(2, 1, 6, 3)
  for _, dtype in ipairs {tc.float64, tc.float32} do
    local qd, kd, vd = q:to(dtype), k:to(dtype), v:to(dtype)
    tc.manual_seed(9)
    local want = by_hand(qd, kd, vd, 0.4)
    tc.manual_seed(9)
    local kernel = sdpa(qd, kd, vd, 0.4)
    tc.manual_seed(9)
    local recorded = sdpa(qd:clone():requires_grad_(), kd, vd, 0.4)
    check.eq(recorded.requires_grad, true)
    local tol = dtype == tc.float64 and 1e-12 or 1e-5
    check.eq(max_diff(kernel, want) < tol, true, ("kernel vs decomposition: %g"):format(max_diff(kernel, want)))
    check.eq(max_diff(recorded, want) < tol, true, ("recorded vs decomposition: %g"):format(max_diff(recorded, want)))
  end
  -- a bool mask, the causal mask and a float mask: the kernel and the recorded forward agree
  local mask = rnd(5, 6):gt(-0.5)
  for _, m in ipairs {{mask, false}, {nil, true}, {rnd(5, 6), false}} do
    tc.manual_seed(10)
    local a = tc.scaled_dot_product_attention(q, k, v, m[1], 0.25, m[2])
    tc.manual_seed(10)
    local b = tc.scaled_dot_product_attention(q:clone():requires_grad_(), k, v, m[1], 0.25, m[2])
    check.eq(max_diff(a, b) < 1e-12, true, ("kernel vs recorded: %g"):format(max_diff(a, b)))
  end
end

-- The gradients use the forward's mask: equal to the decomposition's under the same seed.
function T.dropout_gradients_use_the_forwards_mask()
  tc.manual_seed(3)
  local q, k, v = rnd(2, 5, 4), rnd(2, 6, 4), rnd(2, 6, 3)
  local w = rnd(2, 5, 3)
  local function grads(f)
    local qs, ks, vs = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
    tc.manual_seed(77)
    ;(f(qs, ks, vs, 0.5) * w):sum():backward()
    return {qs.grad, ks.grad, vs.grad}
  end
  local a, b = grads(sdpa), grads(by_hand)
  for i = 1, 3 do check.eq(max_diff(a[i], b[i]) < 1e-12, true, ("gradient %d: %g"):format(i, max_diff(a[i], b[i]))) end
  -- and not the gradient without dropout
  local none = grads(function(x, y, z) return sdpa(x, y, z, 0) end)
  check.eq(max_diff(a[3], none[3]) > 1e-3, true, "the mask changes value's gradient")
end

-- dropout_p = 0 is attention without dropout (and draws nothing); p = 1 drops everything.
function T.dropout_p_zero_is_no_dropout_and_one_zeroes_the_output()
  tc.manual_seed(4)
  local q, k, v = rnd(2, 5, 4), rnd(2, 6, 4), rnd(2, 6, 3)
  local plain = tc.scaled_dot_product_attention(q, k, v)
  check.eq(max_diff(sdpa(q, k, v, 0), plain), 0)
  check.eq(max_diff(sdpa(q:clone():requires_grad_(), k, v, 0), plain), 0)
  check.eq(sdpa(q, k, v, 1):abs():amax():item(), 0)
  tc.manual_seed(8)
  sdpa(q, k, v, 0)
  local after = tc.rand(3)
  tc.manual_seed(8)
  check.eq(max_diff(after, tc.rand(3)), 0, "p = 0 draws no random numbers")
  local ok, e = pcall(sdpa, q, k, v, 1.5)
  check.eq(ok, false)
  check.eq(e.kind, "ValueError")
end

-- On a GPU the same seed gives the CPU's mask (one Philox stream): equal results.
function T.dropout_on_cuda_equals_the_cpu()
  if not tc.cuda.is_available() then check.skip("no CUDA device") end
  tc.manual_seed(6)
  local q, k, v = tc.randn(2, 3, 7, 8), tc.randn(2, 3, 9, 8), tc.randn(2, 3, 9, 8)
  for _, causal in ipairs {false, true} do
    tc.manual_seed(12)
    local want = sdpa(q, k, v, 0.3, causal)
    tc.manual_seed(12)
    local got = sdpa(q:cuda(), k:cuda(), v:cuda(), 0.3, causal):cpu()
    check.eq(max_diff(got, want) < 1e-4, true, ("cuda vs cpu: %g"):format(max_diff(got, want)))
    local qs = q:cuda():requires_grad_()
    tc.manual_seed(12)
    sdpa(qs, k:cuda(), v:cuda(), 0.3, causal):sum():backward()
    local qc = q:clone():requires_grad_()
    tc.manual_seed(12)
    sdpa(qc, k, v, 0.3, causal):sum():backward()
    check.eq(max_diff(qs.grad:cpu(), qc.grad) < 1e-4, true, "cuda vs cpu gradient")
  end
end

return T
