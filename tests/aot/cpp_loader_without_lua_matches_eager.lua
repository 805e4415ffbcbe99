-- scripts/aot_load_example (a C++ program linked with tc_aot_runtime only, no Lua) loads a layer
-- package, binds the layer's weights from a safetensors file and runs it: its outputs equal eager.
-- That it links no Lua is ctest aot_loader_links_no_lua (nm).
local tc = require "tc"
local h = require "helpers"
local S = require "seed_layers"
tc.manual_seed(5)
local layer = S.Layer()
local x = tc.randn(7, 10)
local path = h.tmp("cpp")
tc.aot.compile(tc.export(layer, {x}, {dynamic = {x = {1}}}), {path = path})
local base = path:gsub("%.tcpkg$", "")
local sd = layer:state_dict()
tc.save(base .. ".weights.safetensors", sd)
local x2 = tc.randn(5, 10)
tc.save(base .. ".inputs.safetensors", {x = x2})
local exe = (h.tcrun or "build/tcrun"):gsub("tcrun$", "aot_load_example")
local cmd = ("%s %s %s %s %s 2>&1"):format(exe, path, base .. ".weights.safetensors", base .. ".inputs.safetensors",
                                         base .. ".outputs.safetensors")
local p = assert(io.popen(cmd))
local out = p:read("a")
local ok = p:close()
assert(ok, "aot_load_example failed: " .. out)
assert(out:find("output 1: float32[5, 10]", 1, true), out)
local outs = tc.load(base .. ".outputs.safetensors")
h.close_to_eager(outs["output 1"], tc.no_grad(function() return layer(x2) end), "C++ loader output")

-- the same program refuses a bad package with the loader's message
local f = assert(io.open(path, "rb"))
local bytes = f:read("a")
f:close()
f = assert(io.open(path, "wb"))
f:write(bytes:sub(1, #bytes - 100))
f:close()
p = assert(io.popen(cmd))
out = p:read("a")
assert(not p:close(), "a truncated package must fail")
assert(out:find("is truncated", 1, true), out)
for _, suffix in ipairs({"", ".weights.safetensors", ".inputs.safetensors", ".outputs.safetensors"}) do
  os.remove(suffix == "" and path or base .. suffix)
end
