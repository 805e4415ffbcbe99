-- tcrun --compile-all: metamethods that Lua or a C function calls at a graph break go through the
-- compiler too: __lt, __le and __eq of a comparison run at a break, __tostring reached from
-- tostring and print, __call of a table given to pcall or xpcall. Each gets a code cache of its
-- own in the explain report, and the output (errors included) is plain tcrun's.
local h = require "helpers"

local script = [[
local mt = {}
mt.__lt = function(a, b) io.write("") return a.v < b.v end
mt.__le = function(a, b) io.write("") return a.v <= b.v end
mt.__eq = function(a, b) io.write("") return a.v == b.v end
mt.__tostring = function(a) io.write("") return "V" .. a.v end
mt.__call = function(self, x) io.write("") return self.v + x end
local function V(v) return setmetatable({v = v}, mt) end
local a, b = V(1), V(2)
io.write("")
print(a < b, a <= b, a == b, b < a, a == V(1))
print(tostring(a), a)
print(pcall(a, 5))
print(xpcall(b, debug.traceback, 7))
print(pcall(xpcall, a))
local bad = setmetatable({}, {__tostring = function() io.write("") return {} end})
print(pcall(tostring, bad))
print(pcall(print, bad))
]]
local plain, rc = h.run(script)
h.eq(rc, 0, "plain run:\n" .. plain)
local out, rc2 = h.run(script, "--compile-all --explain")
h.eq(rc2, 0, "compiled run:\n" .. out)
local n = select(2, plain:gsub("\n", "\n"))
local first = out:match("^" .. ("[^\n]*\n"):rep(n))
h.eq(first, plain, "same output")
for line, what in pairs({[2] = "__lt", [3] = "__le", [4] = "__eq", [5] = "__tostring",
                         [6] = "__call", [15] = "a __tostring that returns a table"}) do
  assert(out:find("\n  function <[^>]*:" .. line .. ">:\n"), what .. " has a code cache:\n" .. out)
end
