-- A C function called at a graph break that rejects an argument (luaL_argerror) says what eager
-- says: the callee's name as Lua finds it in the user's code, and for a method call the count
-- without self ("bad argument #1 to 'rep'", "calling 'foo' on bad self"). One case per way Lua
-- names a callee; each both as a call and as a tail call.
local tc = require "tc"
local h = require "helpers"

local s = "x"
local function pick() return string.rep end
local by_table = setmetatable({}, {__index = {foo = string.rep}})
local lookups = 0
local by_function = setmetatable({}, {__index = function(_, k) lookups = lookups + 1; return string.rep end})

local cases = {
  ["string method"] = function(x) local y = x + 1; local r = s:rep({}); return r, y end,
  ["string method, tail call"] = function(x) local y = x + 1; return s:rep({}) end,
  ["method with a bad self"] = function(x) local y = x + 1; local r = by_table:foo(2); return r end,
  ["method through an __index function"] = function(x) local y = x + 1; return by_function:foo({}) end,
  ["io method"] = function(x) local y = x + 1; local r = io.stdout:seek("set", {}); return r end,
  ["field of a local"] = function(x) local y = x + 1; local r = s.rep(s, {}); return r end,
  ["field of a global"] = function(x) local y = x + 1; return string.rep(s, {}) end,
  ["no name (a call's result)"] = function(x) local y = x + 1; local r = (pick())(s, {}); return r end,
  ["integer index"] = function(x) local y = x + 1; local l = {string.rep}; return l[1](s, {}) end,
  ["key in a register"] = function(x) local y = x + 1; local k = "rep"; return string[k](s, {}) end,
  ["local named as the helper's own"] = function(x) local y = x + 1; local pass = string.rep; return pass(s, {}) end,
  ["local named as a keyword-like field"] = function(x) local y = x + 1; local t = {["end"] = string.rep}; return t["end"](s, {}) end,
  ["format"] = function(x) local y = x + 1; local r = ("%d"):format("a"); return r end,
}

local names = {}
for name in pairs(cases) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local fn = cases[name]
  local ok1, e1 = pcall(fn, tc.ones(2))
  local eager_lookups = lookups
  local ok2, e2 = pcall(tc.compile(fn), tc.ones(2))
  h.eq(ok1, false, name .. ": fails eagerly")
  h.eq(ok2, false, name .. ": fails compiled")
  h.eq(e2, e1, name)
  assert(e1:find("bad argument #", 1, true) or e1:find("on bad self", 1, true), e1)
  if name == "method through an __index function" then
    -- the __index function runs once per call, as in eager (the trace's lookup; none at the break)
    h.eq(lookups - eager_lookups, 1, "__index function runs once while compiling")
  end
end

-- the method helper passes the callee and its arguments through unchanged when nothing fails
local sized = setmetatable({1, 2, 3}, {__index = function() return rawlen end})
local f = tc.compile(function(x, n) local y = x + 1; return s:rep(n), sized:len(), y end)
local a, b = f(tc.ones(2), 4)
h.eq(a, "xxxx", "string method result")
h.eq(b, 3, "a method through an __index function gets its self")
