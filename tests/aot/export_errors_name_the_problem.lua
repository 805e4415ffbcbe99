-- tc.export is fullgraph: a graph break is a GraphBreakError at the user's line; non-tensor
-- arguments and results, unknown options and bad compile options are clear errors.
local tc = require "tc"
local h = require "helpers"
local function breaks(x)
  local y = x * 2
  if y:sum():item() > 0 then return y end  -- data-dependent: a break
  return -y
end
local msg, e = h.error_of(tc.export, breaks, {tc.randn(3)})
assert(getmetatable(e) == tc.GraphBreakError, "a break is a GraphBreakError: " .. msg)
h.eq(e.line, 7, "the break names the user's line")
h.expect_error("example argument 2 is a number", tc.export, function(a, b) return a * b end, {tc.randn(2), 3})
h.expect_error("result 2 of the function is a number", tc.export, function(a) return a * 2, 5 end, {tc.randn(2)})
h.expect_error("unexpected option 'fullgraph'", tc.export, function(a) return a * 2 end, {tc.randn(2)}, {fullgraph = true})
h.expect_error("dynamic names input 'y'", tc.export, function(a) return a * 2 end, {tc.randn(2)}, {dynamic = {y = {1}}})
local ep = tc.export(function(a) return a * 2 end, {tc.randn(2)})
h.expect_error("opts.path is required", tc.aot.compile, ep, {})
h.expect_error("unexpected option 'pth'", tc.aot.compile, ep, {pth = "x"})
h.expect_error('device must be "cpu" or "cuda", got "tpu"', tc.aot.compile, ep, {path = h.tmp("x"), device = "tpu"})
h.expect_error("expected an exported program", tc.aot.compile, function() end, {path = "x"})
h.expect_error("unexpected option 'devcie'", tc.aot.load, "x.tcpkg", {devcie = "cuda"})
h.expect_error('device must be a CUDA device ("cuda:1"), got "cpu"', tc.aot.load, "x.tcpkg", {device = "cpu"})
h.expect_error("cannot open", tc.aot.load, "/nonexistent/x.tcpkg")

-- an export traces even where tc.compile would not (tcrun --eager, a force_eager stance)
tc.compiler.set_stance("force_eager")
local fe = tc.export(function(a) return a * 3 end, {tc.randn(2)})
h.eq(#fe.graph.nodes, 3, "the export made its graph under force_eager")
h.eq(tc.compiler.stance, "force_eager", "the stance is restored")
tc.compiler.set_stance("default")
local out = h.run('local tc = require "tc"; print(#tc.export(function(a) return a + 1 end, {tc.randn(2)}).graph.nodes)', "--eager")
assert(out:find("^3"), "tcrun --eager: " .. out)
