-- A parameter the first call does not pass is nil in that trace; a later call that passes it
-- must not reuse the entry (it did: the missing parameter had no guard, and at the break the
-- entry rebuilt it as the constant nil). Found by db.lua of the Lua 5.4 suite under --compile-all.
local tc = require "tc"
local h = require "helpers"

local function name_of(s, x)
  local f = load(s, x)  -- a break: x is rebuilt from the entry
  return debug.getinfo(f, "S").source
end
local cf = tc.compile(name_of)
h.eq(cf("return 1"), "return 1", "chunk name defaults to the code")
h.eq(cf("return 1", "@two"), "@two", "a passed parameter is its value, not the first trace's nil")
h.eq(cf("return 1"), "return 1", "the first entry still serves calls without it")
