-- loss:backward() in a compiled training step is an expected graph break (TC0204, as torch's
-- break at loss.backward()), explained as one: not "a C function tc cannot trace" with the hint to
-- move print, io.* and os.* out of the hot path.
local tc = require "tc"
local nn = tc.nn
local h = require "helpers"

local m = nn.Linear(3, 1)
local function step(x, y)
  local loss = ((m(x) - y) ^ 2):mean()
  loss:backward()
  return loss
end
local function step2(x)
  local loss = m(x):sum()
  tc.autograd.backward(loss)
  return loss
end
for _, case in ipairs {{step, "x:backward()", "loss:backward()"}, {step2, "tc.autograd.backward()", "tc.autograd.backward(loss)"}} do
  local report, text = tc.compiler.explain(case[1])(tc.randn(4, 3), tc.randn(4, 1))
  h.eq(#report.break_reasons, 1, "one break")
  local b = report.break_reasons[1]
  h.eq(b.code, "TC0204", "code")
  h.eq(b.source_line:match("^%s*(.-)%s*$"), case[3], "where")
  assert(b.reason:find("expected", 1, true) and b.reason:find(case[2], 1, true), b.reason)
  assert(not text:find("io.*", 1, true) and text:find("nothing to change", 1, true), text)
end
