-- tc.from_file(path, {dtype, shape, offset, mmap}): a tensor over a binary file (nanoGPT's
-- train.bin, feature dumps) without reading it, through tc._C.map_file (lua_from_file.cpp); and
-- tc.MappedArray, what it gives for file element types tc has no dtype for (uint16 tokens ...).
local tc, T, C = ...
local raise = C.raise
local type, pairs, setmetatable, tostring = type, pairs, setmetatable, tostring

-- File element types without a tc dtype: bytes per item, the dtype windows decode into, signed.
local byte_types = {
  uint16 = {bytes = 2, dtype = "int32", signed = false},
  int16 = {bytes = 2, dtype = "int32", signed = true},
  uint32 = {bytes = 4, dtype = "int64", signed = false},
  int8 = {bytes = 1, dtype = "int32", signed = true},
}

-- A file of uint16 (int16, uint32, int8) items mapped as bytes: `raw` is uint8 of shape
-- (...shape, bytes), little-endian. Reads decode only the bytes they touch into int32 (int64 for
-- uint32): a:narrow(dim, start, length), a:index_select(dim, idx), a[i], a:to(dtype) (all of it).
local MappedArray = {__name = "tc.MappedArray"}
local methods = {}
tc.MappedArray = MappedArray

local function decode(a, raw)
  local bt = a._type
  local dt = tc[bt.dtype]
  local v = raw:select(-1, 1):to(dt)
  local scale = 1
  for j = 2, bt.bytes do
    scale = scale * 256
    v = v + raw:select(-1, j):to(dt) * scale
  end
  if bt.signed then
    local half = 1 << (8 * bt.bytes - 1)
    v = tc.where(v:ge(half), v - 2 * half, v)
  end
  return v
end

local function check_dim(a, dim, what)
  local n = #a.shape
  if math.type(dim) ~= "integer" or dim == 0 or dim > n or dim < -n then
    raise("IndexError", ("MappedArray:%s(): dimension %s out of range for a %d-dim array (dims are 1-based)"):format(what, tostring(dim), n))
  end
  return dim < 0 and dim - 1 or dim  -- counted from the end, past the byte dimension of raw
end

function methods.narrow(a, dim, start, length)
  return decode(a, a.raw:narrow(check_dim(a, dim, "narrow"), start, length))
end
function methods.index_select(a, dim, index)
  return decode(a, a.raw:index_select(check_dim(a, dim, "index_select"), index))
end
function methods.select(a, dim, i)
  local v = decode(a, a.raw:select(check_dim(a, dim, "select"), i))
  return v
end
-- The whole array decoded (reads every byte of the file).
function methods.to(a, dtype)
  local v = decode(a, a.raw)
  if dtype ~= nil then v = v:to(dtype) end
  return v
end
function methods.numel(a) return a.shape:numel() end
function methods.dim(a) return #a.shape end
function methods.size(a, d)
  if d == nil then return a.shape end
  return a.shape[d < 0 and #a.shape + 1 + d or d]
end

MappedArray.__index = function(a, k)
  if math.type(k) == "integer" then
    local v = decode(a, a.raw[k])
    if v:dim() == 0 then return v:item() end
    return v
  end
  return methods[k]
end
MappedArray.__len = function(a) return a.shape[1] or 0 end
MappedArray.__tostring = function(a)
  return ("tc.MappedArray(%s of shape %s, decoded as tc.%s)"):format(a.dtype, tostring(a.shape), a._type.dtype)
end

-- ---- tc.from_file -------------------------------------------------------------------------------
local option_types = {dtype = true, shape = true, offset = "number", mmap = "boolean"}

-- tc.from_file(path, {dtype = tc.uint8, shape = nil, offset = 0, mmap = true}). Without shape, a
-- 1-D tensor of every item after offset; with one, the file's size after offset must be exactly
-- numel × itemsize. mmap = false reads the file into ordinary memory instead.
function tc.from_file(path, opts)
  if type(path) ~= "string" then raise("ValueError", "tc.from_file(path, opts): path must be a string, got " .. type(path)) end
  if opts ~= nil and type(opts) ~= "table" then raise("ValueError", "tc.from_file(path, opts): opts must be a table, got " .. type(opts)) end
  opts = opts or {}
  for k, v in pairs(opts) do
    local want = option_types[k]
    if want == nil then
      local best = C.closest_name(tostring(k), option_types)
      raise("ValueError", ("tc.from_file() got an unexpected option '%s'%s (options: dtype, shape, offset, mmap)"):format(
        tostring(k), best and (" (did you mean '%s'?)"):format(best) or ""))
    end
    if want ~= true and type(v) ~= want then
      raise("ValueError", ("tc.from_file(): option '%s' must be a %s, got %s"):format(k, want, type(v)))
    end
  end
  local dtype = opts.dtype or tc.uint8
  local shape = opts.shape
  if math.type(shape) == "integer" then shape = {shape} end
  local name = type(dtype) == "string" and dtype or nil
  if name and C.dtype(name) then dtype, name = C.dtype(name), nil end
  local raw = C.map_file(path, dtype, opts.offset or 0, shape, opts.mmap)
  if name == nil then return raw end
  local sizes = {}
  for d = 1, raw:dim() - 1 do sizes[d] = raw:size(d) end
  return setmetatable({raw = raw, dtype = name, shape = tc.Size(sizes), _type = byte_types[name]}, MappedArray)
end
