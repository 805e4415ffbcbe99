-- Regional compilation: each Layer's forward compiled (Module:compile); one trace and one backend
-- compile of Layer.forward serve all 64 instances.
local tc = require "tc"
local seed = require "seed_layers"
local h = require "helpers"

-- inference (no_grad): with grad mode on, the eager first linear's output requires grad and the
-- compiled layers' outputs do not (compiled graphs record no tape yet), so the first layer
-- would get an entry of its own
local _ <close> = tc.no_grad()
local model = seed.Model({regional = true})
local x = tc.randn(10, 10)
local y = model(x)
local s = h.stats()
h.eq(s.traces, 1, "one trace of Layer.forward")
h.eq(s.backend_compiles, 1, "one backend compile")
h.eq(s.cache_hits, 63, "the other 63 layers hit the entry")
-- same result as an uncompiled copy with the same weights
local plain = seed.Model()
plain:load_state_dict(model:state_dict())
h.close(y, plain(x), "regional result")

-- tcrun --explain shows it: one graph, one cache entry of Layer.forward hit by every other call
local out = h.run([[
package.path = "scripts/models/?.lua;" .. package.path
local tc = require "tc"
local _ <close> = tc.no_grad()
local model = require("seed_layers").Model({regional = true})
model(tc.randn(10, 10))
model(tc.randn(10, 10))
]], "--explain")
assert(out:find("Graph Count: 1\n", 1, true), out)
assert(out:find("seed_layers.lua:20>: 1 entry, 127 cache hits", 1, true), out)
