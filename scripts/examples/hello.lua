-- hello.lua: a first tour of tc (run: ./build/tcrun scripts/examples/hello.lua).
-- Tensors with PyTorch semantics and Lua syntax: dims and indices are 1-based.
local tc = require "tc"

tc.manual_seed(0)
print("tc " .. tc.__version)

-- Creation: from nested tables, constructors with options tables.
local a = tc.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = tc.float32})
local b = tc.tensor({{1.0, 0.0}, {0.0, 1.0}, {0.5, -0.5}})
print("a =")
print(a)

-- Operators are elementwise and mix with Lua numbers on either side.
print("2 * a - 1 =")
print(2 * a - 1)

-- Matrix product and a softmax over the last dim (-1; dims are 1-based).
local logits = a:matmul(b)
print("a:matmul(b) =")
print(logits)
print("softmax over the last dim =")
print(logits:softmax(-1))

-- Reductions return 1-based indices.
local values, indices = a:max(2)
print("row maxima " .. tostring(values:tolist()[1]) .. ", " .. tostring(values:tolist()[2])
      .. " at columns " .. indices[1]:item() .. ", " .. indices[2]:item())

-- Indexing: x[i] is a row, x[{i, j}] an element, {a, b} an inclusive range; assignment writes in place.
print("a[2] =")
print(a[2])
print("a[{1, 3}]:item() = " .. a[{1, 3}]:item())
print("a[{ {}, {2, 3} }] =")
print(a[{{}, {2, 3}}])
a[{{}, 1}] = 0
print("after a[{ {}, 1 }] = 0:")
print(a)

-- tc.compile returns a function with the same results (capture lands in a later issue).
local function mlp(x, w1, w2)
  return (x:matmul(w1)):relu():matmul(w2):softmax(-1)
end
local fast = tc.compile(mlp)
local x, w1, w2 = tc.randn(4, 8), tc.randn(8, 16), tc.randn(16, 3)
local y = fast(x, w1, w2)
print("compiled mlp output:")
print(y)
print("its rows sum to one:")
print(y:sum(-1))

-- Errors are tables with a kind, raised at your line.
local ok, err = pcall(function() return a:matmul(tc.ones(5, 5)) end)
print("error kind: " .. err.kind)
print("error: " .. tostring(err))
