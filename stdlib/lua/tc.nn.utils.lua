-- tc.nn.utils: gradient clipping as torch.nn.utils (1.13): clip_grad_norm_ and clip_grad_value_;
-- zero_grad for modules and optimizers.
-- `params` is a tensor or an array of tensors (m:parameters()); parameters without .grad are skipped.
local tc = require "tc"
local raise = tc._C.raise
local utils = {}

local function grads_of(params, fn)
  if tc.is_tensor(params) then params = {params} end
  if type(params) ~= "table" then raise("ValueError", fn .. ": params must be a tensor or an array of tensors") end
  local out = {}
  for i, p in ipairs(params) do
    if not tc.is_tensor(p) then raise("ValueError", ("%s: parameter %d is a %s, not a tensor"):format(fn, i, type(p))) end
    local g = p.grad
    if g ~= nil then out[#out + 1] = g end
  end
  return out
end

-- t on the device and in the dtype of `like`; in the usual case (one device, one dtype) without
-- x:to(), whose argument parsing is a graph break under tc.compile.
local function as(t, like)
  if t.device == like.device and t.dtype == like.dtype then return t end
  return t:to(like.device, like.dtype)
end

-- The norm_type norm of all gradients together: one norm per device and dtype over their
-- concatenation (a few launches, not one per gradient), then the norm of those norms.
local function total_norm(grads, norm_type)
  local buckets, order = {}, {}
  for _, g in ipairs(grads) do
    local key = g.device .. "|" .. g.dtype.name  -- not tostring(g.dtype): a graph break under tc.compile
    if not buckets[key] then buckets[key] = {}; order[#order + 1] = key end
    table.insert(buckets[key], g:reshape(-1))
  end
  local norms = {}
  for i, key in ipairs(order) do
    local flat = #buckets[key] == 1 and buckets[key][1] or tc.cat(buckets[key])
    norms[i] = as(tc.norm(flat, norm_type), grads[1])
  end
  return #norms == 1 and norms[1] or tc.norm(tc.stack(norms), norm_type)
end

-- zero_grad(params, {set_to_none = true}): the gradients of params become nil, or with
-- set_to_none = false are zeroed in place (Module:zero_grad and Optimizer:zero_grad).
-- With set_to_none the gradients are not read: under tc.compile, reading them would make each
-- p.grad a guarded input of the step's graph (nil on the first call, a tensor after it: one
-- recompile of the whole forward) that no op uses.
function utils.zero_grad(params, opts)
  local to_none = opts == nil or opts.set_to_none ~= false
  for _, p in ipairs(params) do
    if to_none then
      p.grad = nil
    else
      local g = p.grad
      if g ~= nil then g:zero_() end
    end
  end
end

-- clip_grad_norm_(params, max_norm, norm_type = 2, {error_if_nonfinite = false}): scales the
-- gradients in place so that their total norm is at most max_norm; returns the total norm before
-- clipping (a 0-dim tensor). norm_type may be math.huge (or "inf") for the max norm.
function utils.clip_grad_norm_(params, max_norm, norm_type, opts)
  if type(norm_type) == "table" then norm_type, opts = nil, norm_type end
  opts = opts or {}
  norm_type = norm_type or opts.norm_type or 2
  if norm_type == "inf" then norm_type = math.huge end
  if type(max_norm) ~= "number" then raise("ValueError", "clip_grad_norm_: max_norm must be a number, got " .. type(max_norm)) end
  if type(norm_type) ~= "number" then raise("ValueError", "clip_grad_norm_: norm_type must be a number or \"inf\"") end
  local grads = grads_of(params, "clip_grad_norm_")
  if #grads == 0 then return tc.tensor(0.0) end
  local _ <close> = tc.no_grad()
  local norm = total_norm(grads, norm_type)
  if opts.error_if_nonfinite then
    local v = norm:item()
    if v ~= v or v == math.huge then
      raise("ValueError", ("clip_grad_norm_: the total norm of order %g of the gradients is non-finite (%g), so it cannot be clipped")
        :format(norm_type, v))
    end
  end
  local coef = (max_norm / (norm + 1e-6)):clamp(nil, 1.0)
  for _, g in ipairs(grads) do g:mul_(g.device == coef.device and coef or coef:to(g.device)) end
  return norm
end

-- clip_grad_value_(params, clip_value): clamps every gradient to [-clip_value, clip_value] in place.
function utils.clip_grad_value_(params, clip_value)
  if type(clip_value) ~= "number" then raise("ValueError", "clip_grad_value_: clip_value must be a number, got " .. type(clip_value)) end
  local grads = grads_of(params, "clip_grad_value_")
  local _ <close> = tc.no_grad()
  for _, g in ipairs(grads) do g:clamp_(-clip_value, clip_value) end
end

return utils
