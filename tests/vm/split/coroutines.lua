-- Split-check cases: coroutines (generators, yields inside loops and pcall, status, wrap).
local function gen(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i, i * i) end
    return "done"
  end)
end

local function consume(n)
  local out = {}
  local g = gen(n)
  for _ = 1, n + 1 do
    local a, b = g()
    out[#out + 1] = tostring(a) .. "/" .. tostring(b)
  end
  return table.concat(out, " ")
end

local function ping_pong()
  local co = coroutine.create(function(a, b)
    local c = coroutine.yield(a + b)
    local d, e = coroutine.yield(c * 2)
    return d + e, "end"
  end)
  local r = {}
  local function step(...)
    local res = table.pack(coroutine.resume(co, ...))
    r[#r + 1] = table.concat({tostring(res[1]), tostring(res[2]), tostring(res[3])}, ",")
  end
  step(1, 2); step(10); step(3, 4); step(5)
  return table.concat(r, " | "), coroutine.status(co)
end

local function yield_in_pcall()
  local co = coroutine.wrap(function()
    local ok, err = pcall(function()
      coroutine.yield("in pcall")
      error("after yield")
    end)
    coroutine.yield(ok, err)
    return "finished"
  end)
  local a = co()
  local b, c = co()
  local d = co()
  return a, b, c, d
end

local function producer_consumer(n)
  local function producer()
    return coroutine.create(function()
      for i = 1, n do coroutine.yield("item" .. i) end
    end)
  end
  local function filter(p)
    return coroutine.create(function()
      while true do
        local ok, v = coroutine.resume(p)
        if not v then return end
        if not v:find("2") then coroutine.yield(v:upper()) end
      end
    end)
  end
  local f, got = filter(producer()), {}
  while true do
    local ok, v = coroutine.resume(f)
    if not v then break end
    got[#got + 1] = v
  end
  return table.concat(got, ",")
end

local function generator_loop(n)
  local s = 0
  for v in coroutine.wrap(function() for i = 1, n do coroutine.yield(i) end end) do s = s + v end
  return s, coroutine.isyieldable(), coroutine.running() ~= nil
end

return {
  {consume, 3},
  {ping_pong},
  {yield_in_pcall},
  {producer_consumer, 4},
  {generator_loop, 5},
}
