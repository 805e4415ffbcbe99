-- scripts/examples/aot_regional.lua (seed 001's recipe as users read it) runs and its model's
-- outputs equal eager.
local h = require "helpers"
local p = assert(io.popen((h.tcrun or "build/tcrun") .. " scripts/examples/aot_regional.lua cpu 2>&1"))
local out = p:read("a")
assert(p:close(), "the example failed:\n" .. out)
local diff = tonumber(out:match("max difference to eager:%s+([%d.e+-]+)"))
assert(diff and diff <= 1e-5, "the example's difference to eager:\n" .. out)
assert(out:find("tc.aot.Package(cpu; inputs: x: float32[s0, 10]", 1, true), out)
