-- Modelled builtins with hundreds of values (table.concat of a long list, a C builtin given
-- hundreds of arguments) used to push them all without growing Lua's stack and corrupted the
-- heap (found by the Lua 5.4 suite under --compile-all). They trace, or break, and equal eager.
local tc = require "tc"
local h = require "helpers"

local parts = {}
for i = 1, 2000 do parts[i] = "p" .. i end
local function join(t, sep) return table.concat(t, sep) end
h.eq(tc.compile(join)(parts, ";"), join(parts, ";"), "table.concat of 2000 strings")

local many = {}
for i = 1, 240 do many[i] = i end
local function biggest(t) return math.max(table.unpack(t)) end
h.eq(tc.compile(biggest)(many), 240, "math.max of 240 arguments")
collectgarbage()
