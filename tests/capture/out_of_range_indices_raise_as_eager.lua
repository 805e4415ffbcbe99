-- Index values out of range raise in compiled code as they do eagerly: generated index_select,
-- gather, embedding and cross_entropy (which lowers to a gather of its targets) check their index
-- values before any kernel reads them and raise eager's IndexError (kind, message, the line of the
-- op), also when the indices are computed in the graph or next to an op running on its eager kernel.
-- In-range indices give eager's values exactly (pure data movement).
local tc = require "tc"
local F = require "tc.nn.functional"
local h = require "helpers"

local function i64(t) return tc.tensor(t, {dtype = tc.int64}) end

local cases = {
  {"index_select", function(x, i)
    local y = x + 1
    return y:index_select(1, i) * 2
  end, tc.ones(3), i64({1, 4}), i64({3, 1})},
  {"gather", function(x, i) return (x * 2):gather(2, i) end, tc.ones(2, 3), i64({{1}, {9}}), i64({{3}, {2}})},
  {"embedding", function(w, i) return F.embedding(i, w) + 1 end, tc.randn(3, 2), i64({{1, 0}}), i64({{3, 1}})},
  {"cross_entropy", function(x, t) return F.cross_entropy(x, t) end, tc.randn(2, 3), i64({1, 7}), i64({3, 1})},
  {"computed indices", function(x, i)
    local j = i + 1  -- the index values are made in the graph
    return x:index_select(1, j)
  end, tc.randn(4), i64({2, 4}), i64({0, 3})},
  {"beside an op on its eager kernel", function(x, i)
    local y = x:clone()
    y:fill_(2)  -- in place
    return y:index_select(1, i):cumsum(1)  -- cumsum runs on its eager kernel
  end, tc.randn(3), i64({-1}), i64({2, 2})},
}

for _, backend in ipairs({"tc", "cpu", "loopir"}) do
  for _, c in ipairs(cases) do
    local name, fn, x, bad, good = c[1], c[2], c[3], c[4], c[5]
    local what = backend .. " " .. name
    local cf = tc.compile(fn, {backend = backend})
    local ok1, e1 = pcall(fn, x, bad)
    local ok2, e2 = pcall(cf, x, bad)
    h.eq(ok1, false, what .. " fails eagerly")
    h.eq(ok2, false, what .. " fails compiled")
    h.eq(e2.kind, "IndexError", what .. " kind")
    h.eq(e2.message, e1.message, what .. " message")
    h.eq(e2.line, e1.line, what .. " line")
    if name == "cross_entropy" then
      h.close_to_eager(cf(x, good), fn(x, good), what .. " in range")
    else
      h.close(cf(x, good), fn(x, good), what .. " in range", 0)
    end
  end
end
