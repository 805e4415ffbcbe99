-- Sizes past int64 or past the address space (issue 32): every size, numel, stride and byte count
-- is computed with overflow-checked arithmetic. A numel past int64 is a ShapeError, a tensor whose
-- bytes cannot exist (float32[2^62] needs 2^64) or cannot be allocated is an OutOfMemoryError, and
-- a stride-0 expand to 2^62 elements is a legal view. Before, tc.ones(2^62) crashed, tc.zeros(2^62)
-- "succeeded" over a 0-byte storage and wrapped sizes made views past their storage.
local tc = require "tc"
local check = require "check"
local F = tc.nn.functional
local T = {}

local huge = 2 ^ 62  -- a float: sizes given as floats must be whole and within int64

function T.creation_past_the_address_space_is_out_of_memory()
  for name, f in pairs({
    zeros = function() return tc.zeros(huge) end,
    empty = function() return tc.empty(huge) end,
    ones = function() return tc.ones(huge) end,
    two_dims = function() return tc.zeros(2 ^ 30, 2 ^ 32) end,
    full = function() return tc.full({huge}, 1.5) end,
    rand = function() return tc.rand(huge) end,
    randn = function() return tc.randn(huge) end,
    randint = function() return tc.randint(0, 5, {huge}) end,
    arange = function() return tc.arange(0, huge) end,
    linspace = function() return tc.linspace(0, 1, huge) end,
    float64 = function() return tc.zeros(2 ^ 61, {dtype = tc.float64}) end,
  }) do
    local e = check.raises("OutOfMemoryError", f)
    check.eq(e.message:find("overflows int64", 1, true) ~= nil, true, name .. ": " .. e.message)
  end
  local line, e = check.line(), check.raises("OutOfMemoryError", function() return tc.zeros(huge) end)
  check.eq(e.line, line, "the error points at the user's line")
  -- uint8[2^62] is 2^62 bytes: representable, but more than any address space can map
  e = check.raises("OutOfMemoryError", tc.zeros, huge, {dtype = tc.uint8})
  -- (the CPU allocator names the bytes, CUDA's caching allocator the MiB: 2^62 bytes = 2^42 MiB)
  check.eq(e.message:find("4611686018427387904 bytes", 1, true) ~= nil or
           e.message:find("4398046511104.00 MiB", 1, true) ~= nil, true, e.message)
  check.eq(tc.zeros(3, {dtype = tc.uint8}):sum():item(), 0, "allocation still works after")
end

function T.sizes_past_int64_are_errors()
  local e = check.raises("ShapeError", tc.zeros, 2 ^ 31, 2 ^ 31, 2 ^ 31)
  check.eq(e.message:find("[2147483648, 2147483648, 2147483648]", 1, true) ~= nil, true, e.message)
  check.raises("ShapeError", tc.eye, 2 ^ 32, 2 ^ 32)
  check.raises("ShapeError", tc.randn, 2 ^ 40, 2 ^ 40)
  check.raises("ShapeError", function() return tc.ones(1, 1):expand(huge, huge) end)
  check.raises("ShapeError", function() return tc.ones(2, 3):t():expand(huge, 3, 2) end)
  check.raises("ShapeError", function() return tc.ones(16):view(-1, huge, huge) end)
  check.raises("ShapeError", function() return tc.zeros(0):reshape(huge, huge, -1) end)
  check.shape(tc.zeros(2 ^ 40, 0, 2 ^ 40), {2 ^ 40, 0, 2 ^ 40}, "no element: no overflow")
  -- a float size must be whole and within int64 (casting 2^63 or nan to int64 is undefined)
  for _, n in ipairs({2 ^ 63, 1e30, -1e30, math.huge, 0 / 0, 2.5}) do
    check.raises("ValueError", tc.zeros, n)
    check.raises("ValueError", function() return tc.ones(1):expand(n) end)
  end
  check.raises("ShapeError", tc.zeros, -2 ^ 63)
end

function T.a_huge_expand_is_a_view_and_reducing_it_errors_cleanly()
  local x = tc.ones(1):expand(huge)
  check.shape(x, {huge})
  check.eq(x:stride(1), 0)
  check.eq(x[huge]:item(), 1.0)
  check.eq(x[-1]:item(), 1.0)
  check.shape(x:unsqueeze(1):narrow(1, 1, 1), {1, huge})
  check.shape(x:reshape(2 ^ 31, 2 ^ 31), {2 ^ 31, 2 ^ 31}, "still a stride-0 view")
  check.eq(tostring(x):find("4611686018427387904", 1, true) ~= nil, true, "printing summarises")
  -- tc's reductions and conversions materialise a contiguous temporary: 2^64 bytes cannot
  -- exist (this crashed in the conversion loop, over a wrapped 0-byte buffer)
  check.raises("OutOfMemoryError", function() return x:sum() end)
  check.raises("OutOfMemoryError", function() return x:double() end)
  check.raises("OutOfMemoryError", function() return x:contiguous() end)
  check.raises("OutOfMemoryError", function() return x + 1 end)
  check.raises("OutOfMemoryError", function() return tc.ones(1):expand(2 ^ 61):eq(1) end)
end

function T.unbind_chunk_and_tolist_of_a_huge_view_error_up_front()
  local x = tc.ones(1):expand(huge)
  check.raises("OutOfMemoryError", function() return x:unbind() end)
  check.raises("OutOfMemoryError", function() return x:split(1) end)
  check.raises("OutOfMemoryError", function() return x:chunk(math.maxinteger) end)
  check.raises("OutOfMemoryError", function() return tc.ones(1):expand(2 ^ 31):tolist() end)
  check.eq(#tc.ones(1):expand(5):chunk(math.maxinteger), 5)
end

function T.size_arithmetic_of_movement_ops_never_wraps()
  local x = tc.ones(1):expand(huge)
  local e = check.raises("ShapeError", function() return tc.cat({x, x, x, x}) end)
  check.eq(e.message:find("cat()", 1, true) ~= nil, true, e.message)
  check.raises("ShapeError", function() return x["repeat"](x, 4) end)
  check.raises("ShapeError", function() return F.pad(tc.ones(1, 1, 4), {huge, huge}) end)
  check.raises("ShapeError", function() return F.pad(tc.ones(1, 1, 4), {math.maxinteger, 1}) end)
  -- the sizes sum to 2^64, which wrapped to the empty dim's 0: four 2^62 views of no storage
  check.raises("ShapeError", function() return tc.zeros(0):split_with_sizes({huge, huge, huge, huge}) end)
  check.raises("ShapeError", function() return tc.zeros(4):split_with_sizes({-1, 5}) end)
  -- start + length wrapped past int64 and passed the bounds check
  check.raises("IndexError", function() return tc.ones(4):narrow(1, 3, math.maxinteger) end)
  check.shape(tc.ones(4):narrow(1, 3, 2), {2})
end

function T.size_arithmetic_of_nn_ops_never_wraps()
  local img = tc.ones(1, 1, 2, 2)
  check.raises("ShapeError", function() return F.interpolate(img, {scale_factor = 1e30}) end)
  check.raises("ShapeError", function() return F.interpolate(img, {size = {2 ^ 40, 2 ^ 40}}) end)
  check.raises("OutOfMemoryError", function() return F.interpolate(img, {size = {2 ^ 31, 2 ^ 31}}) end)
  check.raises("ShapeError", function() return F.conv_transpose2d(tc.ones(1, 1, 4, 4), tc.ones(1, 1, 2, 2), nil, huge) end)
  check.raises("ShapeError", function() return F.avg_pool2d(tc.ones(1, 1, 4, 4), {2, 2}, {math.maxinteger, 1}, 0, true) end)
  check.shape(F.max_pool2d(tc.ones(1, 1, 4, 4), 2, huge), {1, 1, 1, 1}, "a huge stride is fine")
end

function T.compiled_creation_past_the_address_space_is_out_of_memory()
  local line, f = check.line(), tc.compile(function(n) return tc.ones(n) * 2 end)
  check.eq(f(3):sum():item(), 6.0)
  local e = check.raises("OutOfMemoryError", f, huge)
  check.eq(e.line, line, "the error points at the op's line in the compiled function")
  check.raises("ShapeError", tc.compile(function() return tc.zeros(2 ^ 31, 2 ^ 31, 2 ^ 31) end))
end

function T.compiled_dynamic_sizes_that_overflow_are_errors()
  -- a graph compiled for symbolic sizes computes s0 * s0 at run time: 2^80 wrapped to 0
  local outer = tc.compile(function(x) return x:unsqueeze(2) * x:unsqueeze(1) end, {dynamic = true})
  check.eq(outer(tc.ones(3)):sum():item(), 9.0)
  check.eq(outer(tc.ones(5)):sum():item(), 25.0)
  check.raises("ShapeError", outer, tc.ones(1):expand(2 ^ 40))
  check.eq(outer(tc.ones(4)):sum():item(), 16.0, "the compiled function still works")
end

function T.a_graph_traced_with_dense_dynamic_inputs_is_not_run_on_a_stride_0_view()
  -- its kernels index the input as dense: a stride-0 expand read past its one-element storage
  -- (garbage, then a crash; found by tests/fuzz/sizes.lua). Now the guard sends it elsewhere.
  local outer = tc.compile(function(x) return x:unsqueeze(2) * x:unsqueeze(1) end, {dynamic = true})
  check.eq(outer(tc.ones(3)):sum():item(), 9.0)
  check.eq(outer(tc.arange(5.0)):sum():item(), 100.0)
  check.eq(outer(tc.full({1}, 2.0):expand(5)):sum():item(), 100.0)
  check.eq(outer(tc.arange(6.0):view(2, 3):t():contiguous():view(-1)):sum():item(), 225.0)
  check.raises("OutOfMemoryError", outer, tc.ones(1):expand(2 ^ 31))
end

return T
