-- Guards cover tensor dtype, requires_grad and the global state (grad mode, default dtype): a
-- change recompiles and the failing guard is reported with its source path.
local tc = require "tc"
local h = require "helpers"

local function f(x) return x * 2 end
local cf = tc.compile(f)
h.close(cf(tc.ones(3)), tc.ones(3) * 2)
h.close(cf(tc.ones(3, {dtype = tc.float64})), tc.ones(3, {dtype = tc.float64}) * 2, "float64")
h.eq(h.stats().recompiles, 1, "dtype recompiles")
tc.set_grad_enabled(false)
cf(tc.ones(3))
tc.set_grad_enabled(true)
h.eq(h.stats().recompiles, 2, "grad mode recompiles")

local report = tc.compiler.explain(function(x, y) return x + y end)(tc.ones(2), tc.ones(2))
h.eq(#report.recompiles, 0)
local _, text = tc.compiler.explain(function(t) return t.w * 2 end)({w = tc.ones(2, 2)})
assert(text:find("arg[1].w float32[2, 2] on " .. tc.get_default_device(), 1, true), text)

-- matmul precision is global state too
tc.compiler.reset()
local mm = tc.compile(function(a, b) return a:matmul(b) end)
mm(tc.ones(2, 2), tc.ones(2, 2))
tc.set_float32_matmul_precision("high")
mm(tc.ones(2, 2), tc.ones(2, 2))
tc.set_float32_matmul_precision("highest")
h.eq(h.stats().recompiles, 1, "precision change recompiles")
