-- print(x) gives PyTorch's text (compared exactly with PyTorch 1.13's output, print_cases.lua)
-- and a footer line with dtype, size and device; tolist() and item() give Lua values.
local tc = require "tc"
local check = require "check"
local cases = require "print_cases"
local T = {}

local function split(s)
  local body, footer = s:match("^(.*)\n(%[tc%.[^\n]*%])$")
  return body, footer
end

function T.printing_matches_pytorch()
  local bad = {}
  for i, case in ipairs(cases) do
    local expected, make = case[1], case[2]
    local ok, x = pcall(make, tc)
    local body = ok and split(tostring(x))
    if body ~= expected then
      bad[#bad + 1] = ("case %d:\n--- expected\n%s\n--- got\n%s"):format(i, expected, ok and tostring(x) or tostring(x))
    end
  end
  if #bad > 0 then error(#bad .. " of " .. #cases .. " cases differ\n" .. table.concat(bad, "\n"), 0) end
end

function T.footer_has_dtype_size_device()
  local _, footer = split(tostring(tc.zeros(2, 3)))
  check.eq(footer, "[tc.float32 of size 2x3 on cpu]")
  _, footer = split(tostring(tc.tensor(1)))
  check.eq(footer, "[tc.int64 of size () on cpu]")
  _, footer = split(tostring(tc.zeros(0, {dtype = tc.bool})))
  check.eq(footer, "[tc.bool of size 0 on cpu]")
end

function T.printing_views_and_noncontiguous()
  local x = tc.arange(6):view(2, 3)
  check.eq(split(tostring(x:t())), "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])")
  check.eq(split(tostring(x[{{}, {1, 3, 2}}])), "tensor([[0, 2],\n        [3, 5]])")
  check.eq(split(tostring(tc.ones(1):expand(3))), "tensor([1., 1., 1.])")
end

function T.tolist()
  check.same(tc.tensor({{1, 2}, {3, 4}}):tolist(), {{1, 2}, {3, 4}})
  check.eq(math.type(tc.tensor({1}):tolist()[1]), "integer")
  check.eq(math.type(tc.tensor({1.0}):tolist()[1]), "float")
  check.same(tc.tensor({true, false}):tolist(), {true, false})
  check.eq(tc.tensor(2.5):tolist(), 2.5, "0-dim gives a number")
  check.same(tc.arange(6):view(2, 3):t():tolist(), {{0, 3}, {1, 4}, {2, 5}}, "non-contiguous")
  check.same(tc.zeros(0):tolist(), {})
  check.same(tc.tensor({0.5}, {dtype = tc.float16}):tolist(), {0.5})
end

function T.item()
  check.eq(tc.tensor(3.5):item(), 3.5)
  check.eq(math.type(tc.tensor(3):item()), "integer")
  check.eq(tc.tensor({{7}}):item(), 7)
  check.eq(tc.tensor(true):item(), true)
  check.eq(tc.ones(2, 2):sum():item(), 4.0)
  check.raises("ValueError", function() return tc.ones(2):item() end)
end

return T
