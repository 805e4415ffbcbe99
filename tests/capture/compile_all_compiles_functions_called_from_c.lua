-- tcrun --compile-all runs the script through tc.compile, and at a break the Lua function given
-- to a C function that calls it (pcall, table.sort, coroutine.wrap, string.gsub) is compiled too:
-- each has its own code cache in the explain report, and results equal plain tcrun's.
local h = require "helpers"

local script = [[
local function body(x) io.write("") return x + 1 end
local ok, v = pcall(body, 1)
local t = {3, 1, 2}
table.sort(t, function(a, b) io.write("") return a < b end)
local co = coroutine.wrap(function(a) io.write("") coroutine.yield(a + 1) end)
local s = string.gsub("ab", "%w", function(c) io.write("") return c:upper() end)
print(ok, v, t[1], t[3], co(1), s)
]]
local plain, rc = h.run(script)
h.eq(rc, 0, "plain run")
local out, rc2 = h.run(script, "--compile-all --explain")
h.eq(rc2, 0, "compiled run")
h.eq(out:match("^[^\n]*"), plain:match("^[^\n]*"), "same output")
for line, what in pairs({[0] = "the script", [1] = "pcall's function", [4] = "sort's comparator",
                         [5] = "the coroutine body", [6] = "gsub's function"}) do
  assert(out:find("\n  function <[^>]*:" .. line .. ">:\n"), what .. " has a code cache:\n" .. out)
end
