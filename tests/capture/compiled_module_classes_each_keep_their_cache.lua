-- tc.compile(module) keys the code cache by the module's forward, as torch.compile does: many
-- module classes compiled side by side never recompile one another, never reach the recompile
-- limit, and a break inside forward still compiles forward (through tc.nn's __call trampoline),
-- once per class. Warnings and reports name the user's code, not tc's wrapper.
local tc = require "tc"
local h = require "helpers"
local nn = tc.nn

local x = tc.randn(4, 8)
local mods = {nn.Linear(8, 8), nn.ReLU(), nn.LayerNorm(8), nn.GELU(), nn.Sigmoid(), nn.Tanh(),
              nn.Dropout(0.0), nn.Softmax(2), nn.SiLU(), nn.Identity(), nn.LeakyReLU()}
for _, m in ipairs(mods) do
  local cm = tc.compile(m)
  for _ = 1, 2 do h.close(cm(x), m(x), tostring(m)) end
end
local s = h.stats()
h.eq(s.recompiles, 0, "recompiles")
h.eq(s.fallbacks, 0, "fallbacks")
h.eq(s.traces, #mods, "one trace per class")
h.eq(s.cache_hits, #mods, "one hit per class")

-- forward breaks the graph: forward itself is compiled (2 graphs per class), for every class
tc.compiler.reset()
local classes = {}
for i = 1, 10 do
  local C = nn.Module:extend("Breaking" .. i)
  C.forward = load(("return function(self, x) local y = x * %d; io.write(''); return y + 1 end"):format(i))()
  classes[i] = C()
end
for i, m in ipairs(classes) do
  local cm = tc.compile(m)
  for _ = 1, 2 do h.close(cm(x), x * i + 1, "class " .. i) end
end
local report = tc.compiler.explain(classes[10])(x)
s = h.stats()
h.eq(s.fallbacks, 0, "fallbacks with breaks")
h.eq(s.recompiles, 0, "recompiles with breaks")
h.eq(report.graph_count, 2, "forward compiled around its break")
for _, c in ipairs(report.caches or {}) do
  assert(not c["function"]:find("compile.lua", 1, true), "a cache named after tc's wrapper: " .. c["function"])
end

-- the recompile-limit warning names the module's class and the user's line, not tc's files
local out = h.run([[
local tc = require "tc"
local m = tc.nn.Linear(3, 3)
local cm = tc.compile(m)
local shape = {3}
for _ = 1, 10 do table.insert(shape, 1, 1); cm(tc.randn(table.unpack(shape))) end
]])
assert(out:find("recompile limit", 1, true), out)
assert(out:find("Linear", 1, true), "warning names the class:\n" .. out)
assert(out:find(":3", 1, true), "warning names the user's line:\n" .. out)
assert(not out:find("compile.lua", 1, true), "warning names tc's wrapper:\n" .. out)
