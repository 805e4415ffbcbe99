-- Views share storage; indexing x[i], x[{i, j}], ranges {a, b, step}, masks; assignment in place.
local tc = require "tc"
local check = require "check"
local T = {}

local function grid() return tc.arange(12):view(3, 4) end  -- rows {0..3}, {4..7}, {8..11}

function T.views_share_storage()
  local x = tc.zeros(2, 3)
  local v = x:view(6)
  v[2] = 5
  check.values(x, {{0, 5, 0}, {0, 0, 0}})
  x:t()[3][2] = 7
  check.values(x, {{0, 5, 0}, {0, 0, 7}})
  x:narrow(2, 1, 1):fill_(1)
  check.values(x, {{1, 5, 0}, {1, 0, 7}})
  local c = x:clone()
  c[1][1] = 9
  check.eq(x[1][1]:item(), 1.0, "clone is a copy")
  local d = x:detach()
  d[1][1] = 4
  check.eq(x[1][1]:item(), 4.0, "detach shares storage")
end

function T.view_ops()
  local x = grid()
  check.shape(x:view(-1), {12})
  check.shape(x:reshape(2, -1), {2, 6})
  check.shape(x:view(tc.Size({6, 2})), {6, 2})
  check.shape(x:permute(2, 1), {4, 3})
  check.values(x:t(), x:transpose(1, 2):tolist())
  check.values(x.T, x:t():tolist())
  check.values(x:narrow(2, 2, 2), {{1, 2}, {5, 6}, {9, 10}})
  check.values(x:select(1, -1), {8, 9, 10, 11})
  check.shape(tc.ones(3, 1):expand(3, 4), {3, 4})
  check.shape(tc.ones(3, 1):expand_as(x), {3, 4})
  check.shape(tc.ones(1, 3, 1):squeeze(), {3})
  check.shape(tc.ones(1, 3, 1):squeeze(1), {3, 1})
  check.shape(tc.ones(2, 3, 4):flatten(2, 3), {2, 12})
  check.shape(tc.ones(2, 3, 4):flatten(), {24})
  check.eq(x:t():contiguous():is_contiguous(), true)
  check.shape(x:view_as(tc.ones(6, 2)), {6, 2})
  check.raises("ShapeError", function() return x:view(5, -1) end)
end

function T.integer_indexing()
  local x = grid()
  check.values(x[1], {0, 1, 2, 3})
  check.values(x[-1], {8, 9, 10, 11})
  check.values(x[2][3], 6)
  check.eq(x[2][3]:dim(), 0)
  check.values(x[{2, 3}], 6)
  check.eq(x[{2, 3}]:dim(), 0, "x[{i, j}] is 0-dim")
  check.values(x[{-1, -1}], 11)
  check.raises("IndexError", function() return x[4] end)
  check.raises("IndexError", function() return x[0] end)
  check.raises("IndexError", function() return x[{1, 5}] end)
  check.raises("IndexError", function() return x[{1, 1, 1}] end)
end

function T.range_indexing()
  local x = grid()
  check.values(x[{{}, {2, 3}}], {{1, 2}, {5, 6}, {9, 10}}, 0, "inclusive range")
  check.values(x[{{2, 3}}], {{4, 5, 6, 7}, {8, 9, 10, 11}})
  check.values(x[{{}, {1, -1, 2}}], {{0, 2}, {4, 6}, {8, 10}}, 0, "step")
  check.values(x[{{-2, -1}, 1}], {4, 8}, 0, "negative range then select")
  check.values(x[{2, {2}}], {5}, 0, "{a} keeps the dim")
  check.values(x[{{}, {}}], x:tolist())
  check.shape(x[{{3, 2}}], {0, 4}, "empty range")
end

function T.mask_and_index_tensors()
  local x = tc.tensor({{1, -2}, {-3, 4}})
  check.values(x[x:gt(0)], {1, 4})
  check.values(x[tc.tensor({2, 1})], {{-3, 4}, {1, -2}}, 0, "1-based index tensor selects rows")
end

function T.assignment_writes_in_place()
  local x = grid():float()
  x[{{}, 1}] = 0
  check.values(x[{{}, 1}], {0, 0, 0})
  x[2] = tc.tensor({1.0, 2.0, 3.0, 4.0})
  check.values(x[2], {1, 2, 3, 4})
  x[{1, {2, 3}}] = -1
  check.values(x[1], {0, -1, -1, 3})
  x[{3, 4}] = 100
  check.eq(x[3][4]:item(), 100.0)
  x[1] = tc.tensor(9.0)  -- broadcast
  check.values(x[1], {9, 9, 9, 9})
  x[x:lt(0)] = 0
  check.eq(x:min():item(), 0.0)
  local y = tc.ones(2, 2)
  y[y:gt(0)] = tc.tensor(3.0)
  check.values(y, {{3, 3}, {3, 3}})
  check.raises("ShapeError", function() x[1] = tc.ones(3) end)
end

function T.inplace_methods()
  local x = tc.tensor({1.0, -2.0})
  check.eq(rawequal(x:add_(1), x), true, "returns self")
  check.values(x, {2, -1})
  x:mul_(x)  -- aliasing
  check.values(x, {4, 1})
  x:neg_():abs_()
  check.values(x, {4, 1})
  x:zero_()
  check.values(x, {0, 0})
  x:fill_(2.5)
  check.values(x, {2.5, 2.5})
  x:copy_(tc.tensor({1, 2}))
  check.values(x, {1, 2})
  x:clamp_(1.5, 1.8)
  check.values(x, {1.5, 1.8})
  local i = tc.tensor({1, 2})
  check.raises("DTypeError", function() i:add_(0.5) end)
  check.raises("ShapeError", function() tc.zeros(3):add_(tc.ones(2, 3)) end)
end

return T
