-- Split-check cases: numeric and generic loops, nesting, break, goto, while and repeat.
local function sum_to(n)
  local s = 0
  for i = 1, n do s = s + i end
  return s
end

local function float_steps(a, b, step)
  local out = {}
  for x = a, b, step do out[#out + 1] = x end
  return out, #out
end

local function countdown(n)
  local t = {}
  for i = n, 1, -2 do t[#t + 1] = i * 1.5 end
  return table.concat(t, " ")
end

local function nested(n, m)
  local acc = 0
  for i = 1, n do
    for j = i, m do
      if (i + j) % 3 == 0 then break end
      acc = acc + i * j
    end
  end
  return acc
end

local function generic(t)
  local keys, total = {}, 0
  for k, v in pairs(t) do keys[#keys + 1] = k; total = total + v end
  table.sort(keys)
  for i, v in ipairs({10, 20, 30}) do total = total + i * v end
  return table.concat(keys, ","), total
end

local function range(n)
  return function(_, i) if i < n then return i + 1 end end, nil, 0
end

local function custom_iter(n)
  local out = {}
  for i in range(n) do
    for j in range(i) do out[#out + 1] = i .. ":" .. j end
  end
  return table.concat(out, " ")
end

local function whiles(n)
  local i, log = 0, {}
  while i < n do
    i = i + 1
    if i % 2 == 0 then goto continue end
    log[#log + 1] = i
    ::continue::
  end
  repeat
    local last = i
    i = i - 3
  until last < 4
  return i, table.concat(log, ",")
end

local function goto_loop(n)
  local i, s = 0, 0
  ::top::
  i = i + 1
  s = s + i
  if i < n then goto top end
  return s
end

local function for_errors(kind)
  if kind == 1 then for i = 1, 10, 0 do end end
  if kind == 2 then for i = "a", 2 do end end
  local s = 0
  for i = math.maxinteger - 2, math.maxinteger do s = s + 1 end
  for i = 3, 1 do s = s + 100 end
  for i = 1.0, 3 do s = s + i end
  return s
end

return {
  {sum_to, 10}, {sum_to, 0},
  {float_steps, 0.5, 2, 0.25}, {float_steps, 1, 3, 1},
  {countdown, 9},
  {nested, 4, 5},
  {generic, {a = 1, b = 2, c = 3}},
  {custom_iter, 3},
  {whiles, 9},
  {goto_loop, 5},
  {for_errors, 1}, {for_errors, 2}, {for_errors, 3},
}
