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

-- x:to(dtype), x:to("cuda"), x:to("cuda", tc.float16), x:to(other), x:to{dtype=, device=, copy=,
-- non_blocking=}. non_blocking: a copy to the GPU from pinned memory (x:pin_memory()) returns at
-- once and runs on the current stream (without it, the host waits for the copy); the pinned
-- block is not reused before the copy ran. Other copies are the same either way.
function T.to(x, ...)
  need(x, "to(): self")
  local dtype, device, copy, non_blocking
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
        elseif k == "non_blocking" then non_blocking = v
        else raise("ValueError", "to() got an unexpected option '" .. tostring(k) .. "'") end
      end
    elseif a ~= nil then
      raise("ValueError", "to(): expected a dtype, a device string, a tensor or an options table, got " .. type(a))
    end
  end
  local r = x
  if device ~= nil and C.device(device) ~= x.device then
    -- a C function: a graph break under tc.compile, where only the plain transfer is traced
    if non_blocking then r = C.to_device_non_blocking(r, device) else r = to_device(r, device) end
  end
  if dtype ~= nil then r = convert(r, dtype) end
  if copy and rawequal(r, x) then r = x:clone() end
  return r
end
function T.cuda(x, opts) return T.to(x, "cuda", opts) end  -- opts: {device =, non_blocking =}
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

-- ---- indexed accumulation and fills, repetition: compositions of scatter/index_select -----------
-- Dims and index values are 1-based (LUA_API.md §2). All of these are made of ops of ops.def, so
-- autograd and capture see scatter_add / scatter / expand / index_select nodes.
local function wrap_dim(name, d, n)
  local lo, hi = n == 0 and -1 or -n, n == 0 and 1 or n
  if math.type(d) ~= "integer" or d == 0 or d < lo or d > hi then
    raise("IndexError", ("%s(): dimension %s out of range (expected to be in range of [%d, %d], dims are 1-based)"):format(
      name, tostring(d), lo, hi))
  end
  return d < 0 and math.max(n, 1) + 1 + d or d
end

-- The 1-D index of index_add/index_fill as a shape [1, .., n, .., 1] (n at dim) expanded to `shape`.
local function index_along(name, index, dim, shape)
  if index:dim() > 1 then raise("IndexError", name .. "(): index is supposed to be a vector (0-d or 1-d), got " .. index:dim() .. "-d") end
  if index.dtype ~= tc.int64 and index.dtype ~= tc.int32 then
    raise("IndexError", name .. "(): index must be an int64 or int32 tensor, got " .. index.dtype.name)
  end
  local view = {}
  for i = 1, #shape do view[i] = 1 end
  view[dim] = index:numel()
  return index:reshape(view):expand(shape)
end

-- x:index_add(dim, index, source[, alpha]): x with alpha * source[.., i, ..] added at x[.., index[i], ..]
-- along dim (repeated indices accumulate), as torch.index_add.
local index_add_sig = C.args.signature("index_add", {
  {"input", K.tensor}, {"dim", K.int}, {"index", K.tensor}, {"source", K.tensor}, {"alpha", K.number, 1}})
function T.index_add(...)
  local a = index_add_sig:bind(...)
  local x, src = a.input, a.source
  local d = wrap_dim("index_add", a.dim, x:dim())
  if x:dim() == 0 then x, src = x:reshape {1}, src:reshape {-1} end
  if src:dim() == 0 then src = src:reshape {1} end
  local n = a.index:numel()
  local ok = src:dim() == x:dim() and src.shape[d] == n
  for i = 1, x:dim() do ok = ok and (i == d or src.shape[i] == x.shape[i]) end
  if not ok then
    raise("ShapeError", ("index_add(): source of shape %s does not match self of shape %s with %d indices along dim %d"):format(
      tostring(a.source.shape), tostring(a.input.shape), n, a.dim))
  end
  if src.dtype ~= x.dtype then
    raise("DTypeError", ("index_add(): self (%s) and source (%s) must have the same dtype"):format(x.dtype.name, src.dtype.name))
  end
  if math.type(a.alpha) == "float" and not x.dtype.is_floating_point then
    raise("ValueError", "index_add(): for integral input tensors, argument alpha must not be a floating point number")
  end
  if a.alpha ~= 1 then src = src * a.alpha end
  return x:scatter_add(d, index_along("index_add", a.index, d, src.shape), src):reshape(a.input.shape)
end

-- x:index_fill(dim, index, value): x with x[.., index[i], ..] = value along dim (value a number or a
-- 0-d tensor), as torch.index_fill.
local index_fill_sig = C.args.signature("index_fill", {
  {"input", K.tensor}, {"dim", K.int}, {"index", K.tensor}, {"value", K.any}})
function T.index_fill(...)
  local a = index_fill_sig:bind(...)
  local x, v = a.input, a.value
  local d = wrap_dim("index_fill", a.dim, x:dim())
  if x:dim() == 0 then x = x:reshape {1} end
  local shape = {}
  for i = 1, x:dim() do shape[i] = x.shape[i] end
  shape[d] = a.index:numel()
  local src
  if is_tensor(v) then
    if v:dim() ~= 0 then
      raise("ValueError", ("index_fill(): only supports a 0-dimensional value tensor, but got tensor with %d dimension(s)"):format(v:dim()))
    end
    src = v:to(x.dtype):expand(shape)
  elseif type(v) == "number" or type(v) == "boolean" then
    src = tc.full(shape, v, {dtype = x.dtype, device = x.device})
  else
    raise("ValueError", "index_fill(): value must be a number or a 0-d tensor, got " .. type(v))
  end
  return x:scatter(d, index_along("index_fill", a.index, d, shape), src):reshape(a.input.shape)
end
tc.index_add, tc.index_fill = T.index_add, T.index_fill
inplace("index_add")
inplace("index_fill")

-- x:repeat_interleave(repeats[, dim]) (torch.repeat_interleave): each element (each slice along
-- dim; of the flattened x without dim) repeated `repeats` times, an integer or a tensor of one
-- count per slice. tc.repeat_interleave(counts) alone gives indices 1..#counts repeated
-- (1-based, as index values are in tc). Integer repeats are an unsqueeze/expand/flatten view chain;
-- tensor repeats read their values (a graph break under compilation: the size depends on them).
local repeat_sig = C.args.signature("repeat_interleave", {
  {"input", K.tensor}, {"repeats", K.any, C.args.None}, {"dim", K.int, C.args.None},
  {"output_size", K.natural, C.args.None}})
function T.repeat_interleave(...)
  local a = repeat_sig:bind(...)
  local x, r, dim = a.input, a.repeats, a.dim
  if r == nil then  -- tc.repeat_interleave(counts)
    if x:dim() > 1 then raise("ShapeError", "repeat_interleave(): repeats must be 0-dim or 1-dim tensor") end
    if x.dtype.is_floating_point or x.dtype == tc.bool then
      raise("DTypeError", "repeat_interleave(): repeats has to be an integer tensor, got " .. x.dtype.name)
    end
    r = x
    x = tc.arange(1, x:numel() + 1, {dtype = tc.int64, device = x.device})
    dim = 1
  end
  if dim == nil then x, dim = x:reshape {-1}, 1 end
  if x:dim() == 0 then x = x:reshape {1} end
  dim = wrap_dim("repeat_interleave", dim, x:dim())
  local n = x.shape[dim]
  if is_tensor(r) and r:numel() == 1 and r:dim() <= 1 and n ~= 1 then r = r:reshape({}):item() end
  local out
  if type(r) == "number" then
    if math.type(r) ~= "integer" then r = math.tointeger(r) or raise("ValueError", "repeat_interleave(): repeats must be an integer, got " .. tostring(a.repeats)) end
    if r < 0 then raise("ValueError", "repeat_interleave(): repeats can not be negative") end
    local shape = {}
    for i = 1, x:dim() do shape[#shape + 1] = x.shape[i]; if i == dim then shape[#shape + 1] = r end end
    out = x:unsqueeze(dim + 1):expand(shape):flatten(dim, dim + 1)
  elseif is_tensor(r) then
    if r:dim() > 1 then raise("ShapeError", "repeat_interleave(): repeats must be 0-dim or 1-dim tensor") end
    if r.dtype.is_floating_point or r.dtype == tc.bool then
      raise("DTypeError", "repeat_interleave(): repeats has to be an integer tensor, got " .. r.dtype.name)
    end
    if r:numel() ~= n then
      raise("ShapeError", ("repeat_interleave(): repeats must have the same size as input along dim %d, but got repeats.size(1) = %d and input.size(%d) = %d"):format(
        dim, r:numel(), dim, n))
    end
    local counts, idx = r:reshape({-1}):tolist(), {}
    for i, c in ipairs(counts) do
      if c < 0 then raise("ValueError", "repeat_interleave(): repeats can not be negative") end
      for _ = 1, c do idx[#idx + 1] = i end
    end
    out = x:index_select(dim, tc.tensor(idx, {dtype = tc.int64, device = x.device}))
  else
    raise("ValueError", "repeat_interleave(): repeats must be an integer or a tensor, got " .. type(r))
  end
  if a.output_size ~= nil and out.shape[dim] ~= a.output_size then
    raise("ValueError", ("repeat_interleave(): output_size %d does not match the repeated size %d"):format(a.output_size, out.shape[dim]))
  end
  return out
end
tc.repeat_interleave = T.repeat_interleave

-- x:new_zeros(size...), new_ones, new_empty, new_full(size, value), new_tensor(data): x's dtype
-- and device unless the trailing options table says otherwise.
local split_options = C.split_options
local function new_options(x, opts, name)
  need(x, name .. "(): self")
  local o = {dtype = x.dtype, device = x.device}
  for k, v in pairs(opts or {}) do o[k] = v end
  return o
end
for _, name in ipairs {"zeros", "ones", "empty"} do
  local f = tc[name]
  T["new_" .. name] = function(x, ...)
    local opts, n = split_options(...)
    local o = new_options(x, opts, "new_" .. name)
    if n == 1 then return f((...), o) end
    local size = {}
    for i = 1, n do size[i] = (select(i, ...)) end
    return f(size, o)
  end
end
function T.new_full(x, size, value, opts) return tc.full(size, value, new_options(x, opts, "new_full")) end
function T.new_tensor(x, data, opts)
  local o = new_options(x, opts, "new_tensor")
  if is_tensor(data) then return data:detach():to({dtype = o.dtype, device = o.device, copy = true}) end
  return tc.tensor(data, o)
end

-- tc.equal(a, b): true when a and b have the same shape and the same values (a Lua boolean; reading
-- it is a graph break under compilation, as torch.equal's Python bool).
function T.equal(x, y)
  need(x, "equal(): input")
  need(y, "equal(): other")
  if x.shape ~= y.shape then return false end
  return x:eq(y):all():item()
end
tc.equal = T.equal

-- tc.randperm(n[, opts]): a random permutation of 1..n (index values are 1-based in tc), int64 by
-- default; the order of n random float64 keys (ties have probability ~ n^2 / 2^54).
function tc.randperm(n, opts)
  if math.type(n) ~= "integer" and not (math.type(n) == "float" and math.tointeger(n)) then
    raise("ValueError", "randperm(): n must be an integer, got " .. tostring(n))
  end
  n = math.tointeger(n)
  if n < 0 then raise("ValueError", "randperm(): n must be non-negative, got " .. n) end
  if opts ~= nil and type(opts) ~= "table" then raise("ValueError", "randperm(): options must be a table such as {dtype = tc.int32}") end
  local o = opts or {}
  for k in pairs(o) do
    if k ~= "dtype" and k ~= "device" and k ~= "requires_grad" then
      raise("ValueError", "randperm() got an unexpected option '" .. tostring(k) .. "' (options: dtype, device, requires_grad)")
    end
  end
  local _, perm = tc.rand(n, {dtype = tc.float64, device = o.device}):sort()
  if o.dtype ~= nil then perm = perm:to(o.dtype) end
  if o.requires_grad then perm.requires_grad = true end
  return perm
end

-- tc.where(cond): the indices of cond's nonzero elements, one 1-D int64 tensor per dim (1-based,
-- as nonzero's), as torch.where(cond) and torch.nonzero(cond, as_tuple=True). Data-dependent
-- size: a graph break under compilation. tc.where(cond, x, y) is the elementwise select.
local where3 = tc.where
function tc.where(cond, ...)
  if select("#", ...) > 0 then return where3(cond, ...) end
  need(cond, "where(): condition")
  if cond:dim() == 0 then cond = cond:reshape {1} end
  local nz = cond:nonzero()
  local out = {}
  for d = 1, cond:dim() do out[d] = nz:select(2, d) end
  return out
end

-- tc.set_printoptions(precision, threshold, edgeitems, linewidth, profile, sci_mode), positionally or
-- by name in an options table, as torch.set_printoptions: a profile ("default", "short", "full")
-- first, then the given fields; sci_mode is reset to nil (chosen from the values) unless given, as
-- PyTorch does. tc.get_printoptions() returns the current options (a table that set_printoptions takes).
local printopts_sig = C.args.signature("set_printoptions", {
  {"precision", K.natural, C.args.None}, {"threshold", K.any, C.args.None}, {"edgeitems", K.natural, C.args.None},
  {"linewidth", K.count, C.args.None}, {"profile", K.choice("default", "short", "full"), C.args.None},
  {"sci_mode", K.bool, C.args.None}})
local profiles = {
  default = {precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80},
  short = {precision = 2, threshold = 1000, edgeitems = 2, linewidth = 80},
  full = {precision = 4, threshold = math.huge, edgeitems = 3, linewidth = 80},
}
function tc.set_printoptions(...)
  local a = printopts_sig:bind(...)
  local t = a.threshold
  if t ~= nil and not (type(t) == "number" and t >= 0 and (math.type(t) == "integer" or t == math.huge or t == math.floor(t))) then
    raise("ValueError", "set_printoptions(): argument 'threshold' must be an integer >= 0 or math.huge, got " .. tostring(t))
  end
  local o = {}
  for k, v in pairs(a.profile and profiles[a.profile] or {}) do o[k] = v end
  for _, k in ipairs {"precision", "threshold", "edgeitems", "linewidth", "sci_mode"} do
    if a[k] ~= nil then o[k] = a[k] end
  end
  C.printoptions(o)
end
function tc.get_printoptions() return C.printoptions() end

-- Torch7 names that mean the same here.
T.nElement, T.cmul = T.numel, T.mul
