-- Tensor method sugar: PyTorch's overloaded forms (max/min, split, to), in-place variants of
-- pointwise ops, dtype/device conversions and small conveniences. Everything here is a thin
-- wrapper over the ops of ops.def (tc.Tensor holds one method per op row already).
local tc, T, C = ...
local raise, is_tensor, is_dtype = C.raise, C.is_tensor, C.is_dtype
local type = type

-- Argument checks: a tc.ValueError at the user's line rather than a Lua error inside tc.
local function need(x, what)
  if not is_tensor(x) then raise("ValueError", ("%s must be a tensor, got %s"):format(what, type(x))) end
  return x
end

-- ---- overloads -----------------------------------------------------------------------------------
-- x:max() -> amax over all; x:max(dim[, opts]) -> values, indices (1-based); x:max(y) -> maximum.
local function reduce_or_binary(all, dim_op, binary)
  return function(x, dim, opts)
    need(x, "self")
    if dim == nil then
      if opts ~= nil then return all(x, nil, opts) end
      return all(x)
    end
    if is_tensor(dim) then return binary(x, dim) end
    if opts ~= nil then return dim_op(x, dim, opts) end
    return dim_op(x, dim)
  end
end
T.max = reduce_or_binary(tc.amax, tc.max_dim, tc.maximum)
T.min = reduce_or_binary(tc.amin, tc.min_dim, tc.minimum)
tc.max, tc.min = T.max, T.min

-- x:split(n[, dim]) or x:split({sizes}[, dim])
local split, split_with_sizes = tc.split, tc.split_with_sizes
function T.split(x, size, ...)
  need(x, "split(): self")
  if type(size) == "table" then return split_with_sizes(x, size, ...) end
  return split(x, size, ...)
end
tc.split = T.split

-- x:where(cond, y) is tc.where(cond, x, y)
function T.where(x, cond, y) return tc.where(cond, need(x, "where(): self"), y) end

-- `repeat` is a Lua keyword: x["repeat"](x, 2, 3) works, and so do x:tile(2, 3) (which pads the
-- repeats with leading 1s like torch.tile) and Torch7's x:repeatTensor(2, 3).
function T.tile(x, ...)
  need(x, "tile(): self")
  local reps = type(...) == "table" and {table.unpack((...))} or {...}
  while #reps < x:dim() do table.insert(reps, 1, 1) end
  return T["repeat"](x, reps)
end
T.repeatTensor = T["repeat"]

-- ---- in place: op_(x, ...) = x:copy_(op(x, ...)), correct even when arguments alias x ---------------
local category = {bool = 0, uint8 = 1, int32 = 1, int64 = 1}
local function rank(dt) return dt.is_floating_point and 2 or category[dt.name] end
local copy_, is_grad_enabled = tc.copy_, tc.is_grad_enabled
local function inplace(name)
  local f = T[name]
  T[name .. "_"] = function(x, ...)
    need(x, name .. "_(): self")
    if x.requires_grad and x.is_leaf and is_grad_enabled() then
      raise("ValueError", name .. "_(): a leaf tensor that requires grad is being used in an in-place operation "
        .. "(modify it under tc.no_grad(), or work on x:detach())")
    end
    local r = f(x, ...)
    if rank(r.dtype) > rank(x.dtype) then
      raise("DTypeError", ("%s_(): result type %s can't be cast to the desired output type %s"):format(
        name, r.dtype.name, x.dtype.name))
    end
    if r.shape ~= x.shape then
      raise("ShapeError", ("%s_(): output with shape %s doesn't match the broadcast shape %s"):format(
        name, tostring(x.shape), tostring(r.shape)))
    end
    return copy_(x, r)
  end
end
for _, name in ipairs {
  "neg", "abs", "sign", "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log1p", "expm1", "sin", "cos",
  "tan", "tanh", "sigmoid", "relu", "gelu", "silu", "softplus", "leaky_relu", "elu", "hardtanh", "clamp",
  "floor", "ceil", "round", "trunc", "reciprocal", "erf", "logical_not", "bitwise_not",
  "add", "sub", "mul", "div", "remainder", "pow", "minimum", "maximum", "eq", "ne", "lt", "le", "gt", "ge",
  "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
  "masked_fill", "lerp", "tril", "triu", "scatter", "scatter_add"} do
  inplace(name)
end
function T.zero_(x) return need(x, "zero_(): self"):fill_(0) end
function T.requires_grad_(x, on)
  need(x, "requires_grad_(): self")
  if on == nil then on = true end
  x.requires_grad = on
  return x
end

-- ---- conversions ----------------------------------------------------------------------------------
local to_dtype, to_device = tc.to_dtype, tc.to_device
local function convert(x, dtype)
  need(x, "self")
  if x.dtype == dtype then return x end
  return to_dtype(x, dtype)
end
for name, dt in pairs {float = tc.float32, double = tc.float64, half = tc.float16, bfloat16 = tc.bfloat16,
                       long = tc.int64, int = tc.int32, byte = tc.uint8, bool = tc.bool} do
  T[name] = function(x) return convert(x, dt) end
end

-- x:to(dtype), x:to("cuda"), x:to("cuda", tc.float16), x:to(other), x:to{dtype=, device=, copy=}
function T.to(x, ...)
  need(x, "to(): self")
  local dtype, device, copy
  for i = 1, select("#", ...) do
    local a = select(i, ...)
    if is_tensor(a) then
      dtype, device = a.dtype, a.device
    elseif is_dtype(a) then
      dtype = a
    elseif type(a) == "string" then
      local d = C.dtype(a)
      if d then dtype = d else device = a end
    elseif type(a) == "table" then
      for k, v in pairs(a) do
        if k == "dtype" then dtype = C.dtype(v) or raise("DTypeError", "to(): unknown dtype " .. tostring(v))
        elseif k == "device" then device = v
        elseif k == "copy" then copy = v
        elseif k ~= "non_blocking" then raise("ValueError", "to() got an unexpected option '" .. tostring(k) .. "'") end
      end
    elseif a ~= nil then
      raise("ValueError", "to(): expected a dtype, a device string, a tensor or an options table, got " .. type(a))
    end
  end
  local r = x
  if device ~= nil and C.device(device) ~= x.device then r = to_device(r, device) end
  if dtype ~= nil then r = convert(r, dtype) end
  if copy and rawequal(r, x) then r = x:clone() end
  return r
end
function T.cuda(x) return T.to(x, "cuda") end
function T.cpu(x) return T.to(x, "cpu") end
function T.type_as(x, y) return convert(x, need(y, "type_as(): other").dtype) end
function T.expand_as(x, y) return need(x, "expand_as(): self"):expand(need(y, "expand_as(): other").shape) end
function T.view_as(x, y) return need(x, "view_as(): self"):view(need(y, "view_as(): other").shape) end
function T.reshape_as(x, y) return need(x, "reshape_as(): self"):reshape(need(y, "reshape_as(): other").shape) end
function T.is_tensor(x) return is_tensor(x) end

-- ---- closeness ------------------------------------------------------------------------------------
-- tc.isclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=false), positionally or with an options
-- table: |input - other| <= atol + rtol * |other| elementwise (broadcast), or equal (infinities
-- included), or both NaN with equal_nan. As in PyTorch, input and other must have the same dtype;
-- bool tensors are compared in the default dtype. A composite of traced ops, so capture records it.
local K = C.args.kinds
local close_rows = {
  {"input", K.tensor}, {"other", K.tensor}, {"rtol", K.nonnegative, 1e-5}, {"atol", K.nonnegative, 1e-8},
  {"equal_nan", K.bool, false},
}
local isclose_sig, allclose_sig = C.args.signature("isclose", close_rows), C.args.signature("allclose", close_rows)
local function isclose(name, x, y, rtol, atol, equal_nan)
  if x.dtype ~= y.dtype then
    raise("DTypeError", ("%s(): %s did not match %s (both tensors need the same dtype)"):format(name, x.dtype.name, y.dtype.name))
  end
  local close = x:eq(y)
  if equal_nan and x.dtype.is_floating_point then close = close:logical_or(x:isnan():logical_and(y:isnan())) end
  if rtol == 0 and atol == 0 then return close end
  if x.dtype == tc.bool then x, y = x:to(tc.get_default_dtype()), y:to(tc.get_default_dtype()) end
  local allowed = (y * rtol):abs() + atol
  local actual = (x - y):abs()
  local finite = actual:isnan():logical_or(actual:isinf()):logical_not()
  return close:logical_or(finite:logical_and(actual:le(allowed)))
end
function T.isclose(...)
  local a = isclose_sig:bind(...)
  return isclose("isclose", a.input, a.other, a.rtol, a.atol, a.equal_nan)
end
-- tc.allclose(input, other, ...) -> a Lua boolean: isclose everywhere (reading the value is a
-- graph break under compilation, as torch.allclose's Python bool is).
function T.allclose(...)
  local a = allclose_sig:bind(...)
  return isclose("allclose", a.input, a.other, a.rtol, a.atol, a.equal_nan):all():item()
end
tc.isclose, tc.allclose = T.isclose, T.allclose

-- Torch7 names that mean the same here.
T.nElement, T.cmul = T.numel, T.mul
