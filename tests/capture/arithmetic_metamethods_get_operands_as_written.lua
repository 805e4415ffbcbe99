-- An arithmetic metamethod gets the event and operands the source wrote, as Lua gives them from
-- the MMBIN* instruction: `t - 3` (ADDI t -3) calls __sub(t, 3), `5.2 + t` (ADDK t 5.2, flipped)
-- calls __add(5.2, t), `2 << t` (SHLI) calls __shl(2, t). Compiled calls record what eager's do.
local tc = require "tc"
local h = require "helpers"

local calls
local mt = {}
for _, e in ipairs {"add", "sub", "mul", "div", "mod", "pow", "idiv", "band", "bor", "bxor", "shl", "shr", "unm", "bnot"} do
  mt["__" .. e] = function(a, b)
    calls[#calls + 1] = e .. "(" .. (type(a) == "table" and "t" or tostring(a)) .. ", " ..
                        (type(b) == "table" and "t" or tostring(b)) .. ")"
    return a
  end
end
local t = setmetatable({}, mt)
local u = setmetatable({}, mt)

local cases = {
  function(x) return x + 1, t - 3 end,
  function(x) return x + 1, 5.2 + t end,
  function(x) return x + 1, 5 + t end,
  function(x) return x + 1, t + 5 end,
  function(x) return x + 1, 3 * t end,
  function(x) return x + 1, t * 2.5 end,
  function(x) return x + 1, t / 2 end,
  function(x) return x + 1, 2 ^ t end,
  function(x) return x + 1, t // 4 end,
  function(x) return x + 1, t % 7 end,
  function(x) return x + 1, t & 1 end,
  function(x) return x + 1, 6 | t end,
  function(x) return x + 1, t ~ 9 end,
  function(x) return x + 1, t << 2 end,
  function(x) return x + 1, 2 << t end,
  function(x) return x + 1, t >> 1 end,
  function(x) return x + 1, t - u end,
  function(x) return x + 1, -t end,
  function(x) return x + 1, ~t end,
  function(x) return x + 1, "10" - t end,
}
for n, fn in ipairs(cases) do
  calls = {}
  local _, eager = fn(tc.ones(1))
  local eager_calls = table.concat(calls, " ")
  calls = {}
  local _, compiled = tc.compile(fn)(tc.ones(1))
  h.eq(table.concat(calls, " "), eager_calls, "case " .. n)
  h.eq(compiled, eager, "case " .. n .. " result")
end
