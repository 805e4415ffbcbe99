-- Split-check cases: to-be-closed variables (normal exit, errors, loops) and closing iterators.
local function closer(log, name)
  return setmetatable({}, {__close = function(_, err)
    log[#log + 1] = "close " .. name .. (err and (" err=" .. tostring(err):gsub("^.-:%d+: ", "")) or "")
  end})
end

local function scoped(n)
  local log = {}
  do
    local a <close> = closer(log, "a")
    local b <close> = closer(log, "b")
    log[#log + 1] = "body " .. n
  end
  log[#log + 1] = "after"
  return table.concat(log, ";")
end

local function close_on_error(n)
  local log = {}
  local ok, e = pcall(function()
    local c <close> = closer(log, "c")
    if n > 1 then error("boom") end
    log[#log + 1] = "no error"
  end)
  return ok, table.concat(log, ";")
end

local function close_in_loop(n)
  local log = {}
  for i = 1, n do
    local c <close> = closer(log, "loop" .. i)
    if i == 2 then goto skip end
    log[#log + 1] = "iter " .. i
    ::skip::
  end
  return table.concat(log, ";")
end

local function closing_iterator(n)
  local log = {}
  local function iter(limit)
    local c = closer(log, "iterator")
    return function(_, i) if i < limit then return i + 1 end end, nil, 0, c
  end
  local s = 0
  for i in iter(n) do
    s = s + i
    if i == 3 then break end
  end
  log[#log + 1] = "sum " .. s
  return table.concat(log, ";")
end

local function close_nil_and_return(flag)
  local log = {}
  local x <close> = nil
  local y <close> = flag and closer(log, "y") or false
  log[#log + 1] = "before return"
  return #log, "value"
end

local function const_locals(a)
  local k <const> = 10
  local s <const> = "str"
  return a * k, s .. a
end

return {
  {scoped, 1},
  {close_on_error, 1}, {close_on_error, 2},
  {close_in_loop, 3},
  {closing_iterator, 5}, {closing_iterator, 2},
  {close_nil_and_return, true}, {close_nil_and_return, false},
  {const_locals, 3},
}
