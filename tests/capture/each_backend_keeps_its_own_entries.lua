-- One function compiled with two backends (or two modes) keeps an entry per backend: a call
-- through the second tc.compile must not run the first backend's compiled code (torch.compile
-- guards on the backend too); the recompile says why.
local tc = require "tc"
local h = require "helpers"

local seen = {}
local function backend(name)
  return function(gm)
    seen[#seen + 1] = name
    return function(...) return gm:forward(...) end
  end
end
local function f(x) return x:sin() + 1 end
local a = tc.compile(f, {backend = backend("A")})
local b = tc.compile(f, {backend = backend("B")})
a(tc.ones(2))
b(tc.ones(2))
a(tc.ones(2))
b(tc.ones(2))
h.eq(table.concat(seen, " "), "A B", "one graph per backend, each reused")
h.eq(h.stats().recompiles, 1, "the second backend is a recompile")

tc.compiler.reset()
local e = tc.compile(f, {backend = "eager"})
local c = tc.compile(f, {backend = "cpu"})
e(tc.ones(2))
c(tc.ones(2))
h.eq(h.stats().traces, 2, "eager and cpu trace once each")
