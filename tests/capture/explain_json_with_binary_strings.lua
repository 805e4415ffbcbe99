-- tcrun --explain=json with a guard on a string that is not UTF-8 (Lua strings are bytes: the
-- pattern tests of the Lua 5.4 suite have many) prints the report, with U+FFFD for such bytes
-- (the JSON writer threw and tcrun aborted).
local h = require "helpers"

local out, rc = h.run([[
local tc = require "tc"
local f = tc.compile(function(s) return #s end)
print(f("\xff\xfe"))
]], "--explain=json")
h.eq(rc, 0, "exit status")
assert(out:find('EQUALS_MATCH: arg[1] \\"\xef\xbf\xbd\xef\xbf\xbd', 1, true), "the guard's string, bytes replaced:\n" .. out)
