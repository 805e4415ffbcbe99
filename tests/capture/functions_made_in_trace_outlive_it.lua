-- A function made in the traced code that outlives the trace (returned, stored in a global or a
-- table from outside, live at a break, handed to a C function) is made real after the graph: its
-- captured locals are shared cells, its upvalues of outer functions are the real ones. Before,
-- the whole frame ran uncompiled. Results equal eager; the frame keeps compiled entries.
local tc = require "tc"
local h = require "helpers"

-- returned: a counter and its reader share one cell
local function make_counter()
  local n = 0
  local function inc() n = n + 1 return n end
  local function get() return n end
  return inc, get
end
local inc, get = tc.compile(make_counter)()
inc(); inc()
h.eq(get(), 2, "returned closures share their captured local")

-- stored in a table from outside, with an upvalue of the compiled function itself
local base = 10
local function install(t)
  t.add = function(x) return x + base end
  return t
end
local t = tc.compile(install)({})
h.eq(t.add(1), 11, "stored closure reads the outer upvalue")
base = 20
h.eq(t.add(1), 21, "outer upvalue is the real one, not a copy")

-- live across a break, then called after it; recursive local function
local function across()
  local function fact(k) if k <= 1 then return 1 end return k * fact(k - 1) end
  io.write("")  -- a break: fact is live after it
  return fact(5)
end
h.eq(tc.compile(across)(), 120, "recursive local function across a break")

-- handed to a C function at a break (table.sort's comparator)
local function sort_desc(list)
  table.sort(list, function(a, b) return a > b end)
  return list
end
local l = tc.compile(sort_desc)({3, 1, 2})
h.eq(table.concat(l, ","), "3,2,1", "comparator made in the trace")

local s = h.stats()
h.eq(s.fallbacks, 0, "no frame ran uncompiled")
