-- `local _ <close> = tc.no_grad()` inside a compiled function traces (it was a TC0407 break that
-- left the rest of the frame uncompiled): the ops in its scope are traced with grad mode off (not
-- differentiated), its __close runs inlined where the block ends or the function returns, and
-- grad mode after the call is eager's. A break inside the scope breaks at the <close> instead.
local tc = require "tc"
local h = require "helpers"

local w = tc.tensor({1.0, 2.0, 3.0}, {requires_grad = true})
local x = tc.tensor({0.5, -1.0, 2.0})

local function block(xb)
  local y, c = xb * w, nil
  do
    local _ <close> = tc.no_grad()
    c = xb * w * 10  -- a constant for autograd
  end
  return ((y + c) * 2):sum(), tc.is_grad_enabled()
end

local function returns_inside(xb)
  local _ <close> = tc.no_grad()
  return xb * w, tc.is_grad_enabled()
end

for _, fullgraph in ipairs {true, false} do
  tc.compiler.reset()
  local cblock = tc.compile(block, {fullgraph = fullgraph})
  for _ = 1, 2 do
    w.grad = nil
    local want, mode_in = block(x)
    want:backward()
    local want_grad = w.grad
    w.grad = nil
    local got, got_mode = cblock(x)
    h.close_to_eager(got, want, "loss")
    h.eq(got_mode, mode_in, "grad mode after the block")
    h.eq(tc.is_grad_enabled(), true, "grad mode after the call")
    got:backward()
    h.close(w.grad, want_grad, "gradient: only the first term differentiated")
  end
  local r, on = tc.compile(returns_inside, {fullgraph = fullgraph})(x)
  h.eq(on, false, "grad mode inside the scope")
  h.eq(r.requires_grad, false, "no history inside the scope")
  h.eq(tc.is_grad_enabled(), true, "grad mode restored after a return inside the scope")
  h.eq(h.stats().graph_breaks, 0, "no break")
end

-- a break inside the scope: the function breaks at the <close> (TC0407) and still runs as eager
local function breaks_inside(xb)
  local y = xb * w
  local _ <close> = tc.no_grad()
  local n = tostring(xb:sum():item())  -- item(): a data-dependent break
  return y + xb * w, n, tc.is_grad_enabled()
end
tc.compiler.reset()
local want_y, want_n, want_on = breaks_inside(x)
local report = tc.compiler.explain(breaks_inside)(x)
h.eq(report.break_reasons[1].code, "TC0407", "break code")
local y, n, on = tc.compile(breaks_inside)(x)
h.close_to_eager(y, want_y, "result")
h.eq(n, want_n, "string")
h.eq(on, want_on, "grad mode inside")
h.eq(tc.is_grad_enabled(), true, "grad mode after the call")
h.eq(y.requires_grad, want_y.requires_grad, "requires_grad as eager")
