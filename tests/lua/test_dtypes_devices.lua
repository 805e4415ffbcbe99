-- Dtype objects, type promotion, conversions, default dtype/device, and devices without a GPU.
local tc = require "tc"
local check = require "check"
local T = {}

function T.dtype_objects()
  check.eq(tostring(tc.float32), "tc.float32")
  check.eq(tostring(tc.bfloat16), "tc.bfloat16")
  check.eq(tc.float, tc.float32)
  check.eq(tc.double, tc.float64)
  check.eq(tc.half, tc.float16)
  check.eq(tc.long, tc.int64)
  check.eq(tc.float32.is_floating_point, true)
  check.eq(tc.int32.is_floating_point, false)
  check.eq(tc.float16.itemsize, 2)
  for _, name in ipairs {"float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"} do
    check.eq(tc.ones(1, {dtype = name}).dtype, tc[name], name)
  end
end

function T.type_promotion()
  local i = tc.tensor({1, 2})
  local f = tc.tensor({1.0, 2.0})
  check.eq((i + f).dtype, tc.float32, "int64 + float32")
  check.eq((i + 1).dtype, tc.int64, "int64 + integer")
  check.eq((i + 2.5).dtype, tc.float32, "int64 + float number -> default dtype")
  check.eq((f + tc.ones(2, {dtype = tc.float64})).dtype, tc.float64)
  check.eq((tc.ones(2, {dtype = tc.float16}) + 1.5).dtype, tc.float16, "numbers do not promote float16")
  check.eq((tc.ones(2, {dtype = tc.float16}) + tc.tensor(1.5, {dtype = tc.float64})).dtype, tc.float16,
           "0-dim tensors do not promote dim tensors of the same category")
  check.eq((i / 2).dtype, tc.float32, "true division of ints")
  check.eq(tc.tensor({true}):add(1).dtype, tc.int64)
end

function T.conversions()
  local x = tc.tensor({1.5, -2.5})
  check.eq(x:double().dtype, tc.float64)
  check.eq(x:half().dtype, tc.float16)
  check.eq(x:bfloat16().dtype, tc.bfloat16)
  check.same(x:long():tolist(), {1, -2})
  check.eq(x:int().dtype, tc.int32)
  check.same(x:bool():tolist(), {true, true})
  check.eq(rawequal(x:float(), x), true, "float() of a float32 tensor is itself")
  check.eq(x:to(tc.float64).dtype, tc.float64)
  check.eq(x:to("float16").dtype, tc.float16)
  check.eq(x:to{dtype = tc.int32}.dtype, tc.int32)
  check.eq(x:to("cpu").device, "cpu")
  check.eq(x:to("cpu", tc.float64).dtype, tc.float64)
  check.eq(x:to(tc.ones(1, {dtype = tc.int64})).dtype, tc.int64, "to(other)")
  check.eq(rawequal(x:to{copy = true}, x), false, "copy=true")
  check.eq(x:type_as(tc.ones(1, {dtype = tc.float64})).dtype, tc.float64)
  check.eq(x:cpu().device, "cpu")
end

function T.default_dtype()
  check.eq(tc.get_default_dtype(), tc.float32)
  tc.set_default_dtype(tc.float64)
  local ok, e = pcall(function()
    check.eq(tc.zeros(2).dtype, tc.float64)
    check.eq(tc.tensor({1.5}).dtype, tc.float64)
    check.eq(tc.tensor({1}).dtype, tc.int64)
  end)
  tc.set_default_dtype(tc.float32)
  if not ok then error(e, 0) end
  check.raises("DTypeError", tc.set_default_dtype, tc.int64)
end

function T.devices_are_strings()
  local x = tc.ones(2)
  check.eq(x.device, "cpu")
  check.eq(tc.get_default_device(), "cpu")
  check.eq(type(tc.cuda.is_available()), "boolean")
  check.raises("ValueError", function() return tc.ones(2, {device = "tpu"}) end)
end

function T.cuda_without_gpu_is_a_device_error()
  if tc.cuda.is_available() then check.skip("a CUDA device is present (tests/cuda cover it)") end
  check.raises("DeviceError", function() return tc.ones(2, {device = "cuda"}) end)
  check.raises("DeviceError", function() return tc.tensor({1.0}, {device = "cuda"}) end)
  check.raises("DeviceError", function() return tc.ones(2):cuda() end)
  check.raises("DeviceError", function() return tc.ones(2):to("cuda:0") end)
  check.raises("DeviceError", tc.cuda.synchronize)
end

function T.default_device_cuda_fails_on_use()
  tc.set_default_device("cuda")
  local ok, e = pcall(tc.zeros, 2)
  tc.set_default_device("cpu")
  if tc.cuda.is_available() then  -- with a GPU the default device is used
    check.eq(ok, true, tostring(e))
    check.eq(e.device, "cuda:0")
  else
    check.eq(ok, false)
    check.eq(e.kind, "DeviceError")
  end
  check.eq(tc.zeros(2).device, "cpu")
end

return T
