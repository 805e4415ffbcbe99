-- tc._args: binds a function's arguments to its PyTorch signature (tc.nn's layer constructors,
-- tc.isclose ...). A signature is data, one row per parameter in PyTorch's order,
-- {name, kind[, default]} (no default: required; args.None: optional with no value), so positional
-- calls (nn.Conv2d(3, 8, 3, 2, 1)), the options table (nn.Conv2d(3, 8, 3, {stride = 2, padding = 1}))
-- and mixes of both bind alike, and a wrong argument is a tc.ValueError naming the function and the
-- parameter, raised at the user's line. Runs when tc opens (after tc._api) and leaves itself in
-- tc._C.args.
local _, _, C = ...
local raise, is_options, is_tensor = C.raise, C.is_options, C.is_tensor
local mtype, type, select, getmetatable = math.type, type, select, getmetatable

local args = {}

-- The default of a parameter that is optional and has no value (PyTorch's `None`).
args.None = setmetatable({}, {__name = "None", __tostring = function() return "None" end})
local None = args.None

-- ---- kinds: what a parameter accepts ------------------------------------------------------------
-- A kind is {what = text for errors, ok = predicate[, norm = the value to bind, from an accepted
-- one][, array = takes an array table][, dict = takes a table with string keys]}.
local K = {}
args.kinds = K
local function kind(what, ok, extra)
  local k = {what = what, ok = ok}
  for key, v in pairs(extra or {}) do k[key] = v end
  return k
end
local function plain_table(v) return type(v) == "table" and getmetatable(v) == nil end
-- Lua's `/` gives floats: an integral float (2.0) counts as an integer, as in tc's own binding,
-- and is bound as one (so are the elements of an array of them).
local function int(v) return mtype(v) == "float" and math.tointeger(v) or v end
local function ints(v)
  if not plain_table(v) then return int(v) end
  local out = {}
  for i, e in ipairs(v) do out[i] = int(e) end
  return out
end
local function int_at_least(lo) return function(v) v = int(v); return mtype(v) == "integer" and v >= lo end end
-- An array of 1..n values (n = nil: any length >= 1), each accepted by elem.
local function array_of(v, elem, n)
  if not plain_table(v) or #v == 0 or (n and #v ~= n) then return false end
  for key, e in pairs(v) do
    if mtype(key) ~= "integer" or key < 1 or key > #v or not elem(e) then return false end
  end
  return true
end

local is_count, is_natural = int_at_least(1), int_at_least(0)
K.count = kind("an integer >= 1", is_count, {norm = int})
K.natural = kind("an integer >= 0", is_natural, {norm = int})
K.int = kind("an integer", function(v) return mtype(int(v)) == "integer" end, {norm = int})
K.dim = kind("a dimension (a nonzero integer: 1-based, negative from the end)",
  function(v) return mtype(int(v)) == "integer" and v ~= 0 end, {norm = int})
K.number = kind("a number", function(v) return type(v) == "number" end)
K.nonnegative = kind("a number >= 0", function(v) return type(v) == "number" and v >= 0 end)
K.probability = kind("a probability between 0 and 1", function(v) return type(v) == "number" and v >= 0 and v <= 1 end)
K.bool = kind("a boolean", function(v) return type(v) == "boolean" end)
K.string = kind("a string", function(v) return type(v) == "string" end)
K.tensor = kind("a tensor", is_tensor)
K.dtype = kind("a dtype such as tc.float32", function(v) return C.dtype(v) ~= nil end)
K.device = kind('a device such as "cpu", "cuda" or "cuda:0"', function(v) return type(v) == "string" and (pcall(C.device, v)) end)
K.any = kind("any value", function() return true end)
-- tc.nn sets args.is_module when it loads.
local function is_module(v) return args.is_module(v) end
K.module = kind("a module", is_module)
K.module_list = kind("an array of modules", function(v)
  return plain_table(v) and (next(v) == nil or array_of(v, is_module))
end, {array = true})
K.module_dict = kind("a table of name = module", function(v)
  if not plain_table(v) then return false end
  for key, m in pairs(v) do
    if type(key) ~= "string" or not is_module(m) then return false end
  end
  return true
end, {array = true, dict = true})
K.shape = kind("an integer >= 1 or an array of them", function(v) return is_count(v) or array_of(v, is_count) end,
  {array = true, norm = ints})
K.activation = kind('"relu", "gelu" or a function', function(v)
  return v == "relu" or v == "gelu" or type(v) == "function" or (getmetatable(v) or {}).__call ~= nil
end)

-- One of the given strings.
function K.choice(...)
  local set, names = {}, {}
  for i, s in ipairs {...} do set[s], names[i] = true, '"' .. s .. '"' end
  return kind("one of " .. table.concat(names, ", "), function(v) return set[v] == true end)
end

-- An integer >= lo, or an array of n of them (a per-dimension size such as a kernel or a stride).
function K.size(n, lo)
  local elem = int_at_least(lo or 1)
  local what = ("an integer >= %d or an array of %d of them"):format(lo or 1, n)
  return kind(what, function(v) return elem(v) or array_of(v, elem, n) end, {array = true, norm = ints})
end

-- A convolution's padding: an integer >= 0, an array of n of them, or "same" / "valid".
function K.padding(n, strings)
  local what = ("an integer >= 0 or an array of %d of them%s"):format(n, strings and ', or "same" or "valid"' or "")
  return kind(what, function(v)
    return is_natural(v) or array_of(v, is_natural, n) or (strings and (v == "same" or v == "valid"))
  end, {array = true, norm = ints})
end

-- ---- binding ------------------------------------------------------------------------------------
-- Shows a value in an error message.
local function show(v)
  if type(v) == "string" then return ('"%s"'):format(v) end
  if is_tensor(v) then return "a tensor" end
  if plain_table(v) then
    local parts = {}
    for i = 1, math.min(#v, 8) do parts[i] = show(v[i]) end
    if next(v) ~= nil and #v == 0 then return "a table with keys" end
    return "{" .. table.concat(parts, ", ") .. (#v > 8 and ", ..." or "") .. "}"
  end
  if type(v) == "table" then return getmetatable(v).__name or "a table" end
  return tostring(v)
end

local Signature = {}
Signature.__index = Signature

-- args.signature("nn.Conv2d", rows) -> a signature whose :bind(...) returns {name = value}; its
-- errors begin with the given name: "nn.Conv2d(): ...".
-- Rows: {name, kind[, default][, only_default = true]}; only_default marks a PyTorch parameter
-- tc does not implement beyond its default (binding another value is a NotImplementedError).
-- The names "*args" and "**kwargs" collect the remaining positional arguments / options.
function args.signature(name, rows)
  local s = setmetatable({name = name, rows = rows, by_name = {}, names = {}}, Signature)
  for i, row in ipairs(rows) do
    assert(type(row[1]) == "string" and type(row[2]) == "table" and row[2].ok, name .. ": malformed signature row " .. i)
    if row[1] == "*args" then
      s.varargs = i
    elseif row[1] == "**kwargs" then
      s.kwargs = true
    else
      s.by_name[row[1]] = i
      s.names[#s.names + 1] = row[1]
    end
  end
  return s
end

function Signature:fail(kind, fmt, ...)
  raise(kind, ("%s(): " .. fmt):format(self.name, ...))
end

-- The number of leading arguments bound by position (the rest is the options table, if any).
function Signature:positional_count(n, ...)
  if n == 0 then return 0 end
  local last = select(n, ...)
  if not plain_table(last) then return n end
  -- A trailing table with string keys (or an empty one) is the options table, unless the
  -- parameter in its position takes such a table itself (nn.ModuleDict{a = m}, nn.ModuleList{}).
  local row = self.rows[self.varargs and math.min(n, self.varargs) or n]
  local k = row and row[2]
  local empty = next(last) == nil
  if empty and not (k and k.array) then return n - 1 end
  if not empty and is_options(last) and not (k and k.dict) then return n - 1 end
  return n
end

-- Checks v against row i, and returns the value to bind.
function Signature:check(i, v, how)
  local row = self.rows[i]
  local name, k, default = row[1], row[2], row[3]
  if v == nil then
    if #row < 3 then self:fail("ValueError", "missing required argument '%s' (argument %d)", name, i) end
    if default == None then return nil end
    return default
  end
  if not k.ok(v) then
    self:fail("ValueError", "argument '%s' (%s) must be %s, got %s", name, how, k.what, show(v))
  end
  local only = default
  if only == None then only = nil end
  if row.only_default and v ~= only then
    self:fail("NotImplementedError", "%s = %s is not supported by tc (only the default, %s)", name, show(v), show(default))
  end
  if k.norm then return k.norm(v) end
  return v
end

-- Binds (...) to the signature: positional arguments in PyTorch's order, then optionally an
-- options table with any parameter by name. Returns {name = value} with defaults filled in
-- (None is nil) and, with *args, the remaining positional arguments as an array under "*args".
function Signature:bind(...)
  local total = select("#", ...)
  local n = self:positional_count(total, ...)
  local opts = n < total and select(total, ...) or nil
  local fixed = self.varargs and self.varargs - 1 or #self.rows
  if n > fixed and not self.varargs and fixed == 0 then
    self:fail("ValueError", "takes no arguments, got %d", n)
  elseif n > fixed and not self.varargs then
    self:fail("ValueError", "takes at most %d positional argument%s (%s), got %d", fixed, fixed == 1 and "" or "s",
      table.concat(self.names, ", "), n)
  end
  local given, how = {}, {}
  for i = 1, math.min(n, fixed) do
    local v = select(i, ...)
    if v ~= nil then given[i], how[i] = v, "argument " .. i end
  end
  local out = {}
  if self.varargs then
    local rest, k = {}, self.rows[self.varargs][2]
    for i = fixed + 1, n do
      local v = select(i, ...)
      if not k.ok(v) then self:fail("ValueError", "argument %d must be %s, got %s", i, k.what, show(v)) end
      rest[#rest + 1] = v
    end
    out["*args"] = rest
  end
  for key, v in pairs(opts or {}) do
    local i = self.by_name[key]
    if i == nil and not self.kwargs then
      self:fail("ValueError", "got an unexpected option '%s' (its parameters: %s)", tostring(key),
        #self.names > 0 and table.concat(self.names, ", ") or "none")
    end
    if i ~= nil then
      if given[i] ~= nil then
        self:fail("ValueError", "got multiple values for '%s' (argument %d and the options table)", key, i)
      end
      given[i], how[i] = v, "in the options table"
    end
  end
  for i, row in ipairs(self.rows) do
    if i ~= self.varargs and row[1] ~= "**kwargs" then out[row[1]] = self:check(i, given[i], how[i]) end
  end
  return out
end

-- Creation options {dtype=, device=} from bound arguments, or nil when neither is given.
function args.factory(a)
  if a.dtype == nil and a.device == nil then return nil end
  return {dtype = a.dtype, device = a.device}
end

C.args = args
