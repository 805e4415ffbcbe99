-- Closures and upvalues, varargs, calls and tail calls, every return form, to-be-closed variables.
local up = 0
local function counter()
  local n = 0
  return function(d) n = n + (d or 1); up = up + 1; return n end
end
local function pack(...) return select("#", ...), ... end
local function tail(f, ...) return f(...) end
local function none() end
local function one(x) return x end
local function many(a, b) return a, b, a + b end
local function close_me()
  local log = {}
  do
    local c <close> = setmetatable({}, {__close = function() log[#log + 1] = "closed" end})
    log[#log + 1] = "body"
  end
  return log
end
local function concat(a, b, c) local p, q = nil, nil; return a .. b .. c, p, q, 1.0, -2.0 end
G = counter()
G(2)
local x <const> = 5
return tail(pack, many(1, 2)), none(), one(x), close_me(), concat("a", 1, 2.5), up
