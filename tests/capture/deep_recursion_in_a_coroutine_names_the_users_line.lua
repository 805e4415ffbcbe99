-- Unbounded recursion through a compiled function inside a coroutine raises Lua's 'stack overflow'
-- at the user's line, as eager does and as on the main thread, not at tc's wrapper
-- ([tc]/compile.lua:4); the check begins only once the coroutine is deep, so shallow coroutines'
-- stacks are not grown for it.
local tc = require "tc"
local h = require "helpers"

local function deep(x) return deep(x) + 1 end
local eager = coroutine.wrap(function() return select(2, pcall(deep, tc.ones(2))) end)()
local compiled = coroutine.wrap(function() return select(2, pcall(tc.compile(deep), tc.ones(2))) end)()
h.eq(tostring(compiled), tostring(eager), "stack overflow in a coroutine")
assert(tostring(compiled):find("deep_recursion_in_a_coroutine_names_the_users_line.lua:8: stack overflow", 1, true),
  tostring(compiled))

-- the same through coroutine.resume, the recursion under a compiled caller
local function outer(x) local y = x * 2; io.write(""); return deep(y) end
local co = coroutine.create(function(x) return tc.compile(outer)(x) end)
local ok, e = coroutine.resume(co, tc.ones(2))
h.eq(ok, false, "resume fails")
assert(tostring(e):find("deep_recursion_in_a_coroutine_names_the_users_line.lua:8: stack overflow", 1, true), tostring(e))

-- shallow coroutines that call compiled functions still run them
local f = tc.compile(function(x) return x + 1 end)
for _ = 1, 3 do
  h.close(coroutine.wrap(function() return f(tc.ones(2)) end)(), tc.ones(2) * 2, "shallow coroutine")
end

-- ... and their stacks stay small (the margin checked from the first call would add 16 KB each)
local x = tc.ones(2)
local cos = {}
collectgarbage(); collectgarbage("stop")
local m0 = collectgarbage("count")
for i = 1, 200 do
  local c = coroutine.create(function() f(x); coroutine.yield() end)
  coroutine.resume(c)
  cos[i] = c
end
local per = (collectgarbage("count") - m0) / 200
collectgarbage("restart")
assert(per < 8, ("%.1f KB per suspended coroutine"):format(per))
