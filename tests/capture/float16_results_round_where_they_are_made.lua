-- A float16/bfloat16 result is rounded to its dtype where the op makes it, as eager stores it, also
-- when the code generator fuses it into a float32 computation: `x:to(f16):to(f32) * 3` compiled
-- skipped the rounding (computing in float32 made the round trip a no-op) and differed from eager
-- by up to 3e-4 relative, far outside float32's tolerance. Compiled must equal eager bit for bit
-- here, on the CPU and (when there is one) on the GPU.
local tc = require "tc"
local h = require "helpers"

local function check(device)
  tc.manual_seed(0)
  local x = (tc.randn(4099) * 40):to(device)
  local fns = {
    round_trip_f16 = function(v) return v:to(tc.float16):to(tc.float32) * 3 end,
    round_trip_bf16 = function(v) return v:to(tc.bfloat16):to(tc.float32) * 3 end,
    f16_times_3 = function(v) return v:to(tc.float16) * 3 end,
    f16_chain = function(v) local a = v:to(tc.float16); return ((a * 3) + a):to(tc.float32) * 0.1 end,
  }
  for name, f in pairs(fns) do
    tc.compiler.reset()
    local want = f(x):to(tc.float32)
    local got = tc.compile(f, {fullgraph = true})(x):to(tc.float32)
    local diff = (got - want):abs():max():item()
    h.eq(diff, 0, device .. " " .. name .. ": compiled differs from eager by " .. tostring(diff))
  end
end

check("cpu")
if tc.cuda.is_available() then check("cuda") end
