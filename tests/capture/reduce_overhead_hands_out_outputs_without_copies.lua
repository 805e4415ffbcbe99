-- mode = "reduce-overhead" hands its outputs out of the CUDA graph's pool without copying them
-- (`tcrun --device=cuda tests/capture/run.lua reduce_overhead`; on the CPU it checks results only):
-- an output still referenced when the graph replays again is moved out first and keeps its values,
-- views of it included; outputs dropped (collected) before the next call are never copied; big
-- dropped outputs, and many dropped ones, need no explicit collection, and many kept ones do not
-- cost a collection every call; saved activations consumed by a backward are not copied; outputs
-- under 1 MiB in all are copied out right after each replay; every result equals eager; once
-- recorded, a backward reads the saved activations in place (no static buffers).
local tc = require "tc"
local h = require "helpers"

local on_gpu = tc.get_default_device():sub(1, 4) == "cuda"
local function stats() return tc.cuda.graph_stats() end
local function moved_since(s0) return stats().outputs_moved - s0.outputs_moved end

-- two outputs over one storage (y and its flat view) and one over another, 1 MiB each
local function f(x)
  local y = x * 2
  return y, y:view(-1), x + 1
end
local cf = tc.compile(f, {mode = "reduce-overhead"})
local x = tc.randn(512, 512)
for _ = 1, 3 do cf(x) end  -- warm-up, recording, a replay
collectgarbage()

-- kept across the next call: moved out once per storage, values and views kept
local y, yv, z = cf(x)
local y_want, _, z_want = f(x)
local s0 = stats()
x:copy_(tc.randn(512, 512))
local y2, y2v, z2 = cf(x)
if on_gpu then h.eq(moved_since(s0), 2, "storages moved out for the kept outputs") end
h.close_to_eager(y, y_want, "kept output")
h.close_to_eager(z, z_want, "second kept output")
h.close_to_eager(y2, (f(x)), "next call's output")
h.close_to_eager(z2, select(3, f(x)), "next call's second output")
yv:add_(1)  -- a view of a moved output still views it
h.close_to_eager(y, y_want + 1, "kept output written through its view")
h.close(yv, y:view(-1), "view of the kept output", 0)
y, yv, z, y2, y2v, z2 = nil, nil, nil, nil, nil, nil

-- dropped and collected before the next call: never copied
collectgarbage()
s0 = stats()
for i = 1, 4 do
  x:copy_(tc.randn(512, 512))
  local a, av, b = cf(x)
  local ea, eav, eb = f(x)
  h.close_to_eager(a, ea, "call " .. i)
  h.close(av, a:view(-1), "view among outputs, call " .. i, 0)
  h.close_to_eager(b, eb, "second output, call " .. i)
  a, av, b = nil, nil, nil
  collectgarbage()
end
if on_gpu then
  h.eq(moved_since(s0), 0, "outputs moved though dropped")
  assert(stats().outputs_handed - s0.outputs_handed >= 8, "outputs were not handed out of the pool")
end

-- many dropped outputs (like a training step's gradients after zero_grad), not collected: the
-- replay collects first when at least 32 storages would move, so none is copied
local terms = {}
for i = 1, 40 do terms[i] = ("v * %d"):format(i) end
local many = tc.compile(load("return function(v) return " .. table.concat(terms, ", ") .. " end")(),
                        {mode = "reduce-overhead"})
local mx = tc.randn(256, 128)  -- 128 KiB an output, 5 MiB in all
for _ = 1, 3 do many(mx) end
collectgarbage()
s0 = stats()
for i = 1, 3 do
  local outs = {many(mx)}
  h.close_to_eager(outs[40], mx * 40, "40th of many outputs, call " .. i)
  outs = nil  -- dropped; the next replay finds them garbage
end
if on_gpu then h.eq(moved_since(s0), 0, "storages moved out though 40 outputs were dropped") end

-- many outputs kept by the caller: a collection that frees none of them makes the graph's next
-- 1, 2, 4 ... replays move them without collecting (calls 1, 2, 4 and 7 of 10 collect)
s0 = stats()
local kept = {}
for i = 1, 10 do
  kept[i] = {many(mx)}
  h.close_to_eager(kept[i][40], mx * 40, "40th of many kept outputs, call " .. i)
end
h.close_to_eager(kept[1][7], mx * 7, "a kept output after later replays")
if on_gpu then
  local c = stats().collections - s0.collections
  assert(c <= 4, ("%d collections in 10 replays that kept their 40 outputs"):format(c))
  h.eq(moved_since(s0), 9 * 40, "kept outputs moved out by the next replay")
end
kept = nil

-- small outputs: copied out right after each replay, dropped or not
local small = tc.compile(function(v) return v + 1, v * 2 end, {mode = "reduce-overhead"})
local sx = tc.randn(4, 3)
for _ = 1, 3 do small(sx) end
collectgarbage()
s0 = stats()
for i = 1, 3 do
  local p, q = small(sx)
  h.close_to_eager(p, sx + 1, "small output, call " .. i)
  h.close_to_eager(q, sx * 2, "second small output, call " .. i)
  p, q = nil, nil
  collectgarbage()
end
if on_gpu then h.eq(moved_since(s0), 6, "small outputs copied out") end

-- an output fed back as the next call's input
local g = tc.compile(function(v) return (v * 0.5):sin() + 1 end, {mode = "reduce-overhead"})
local v, ve = tc.randn(16), nil
ve = v:clone()
for i = 1, 6 do
  v = g(v)
  ve = (ve * 0.5):sin() + 1
  h.close_to_eager(v, ve, "chained call " .. i)
end

-- 64 MiB of outputs dropped without a collection: the replay collects instead of copying them
if on_gpu then
  local big = tc.compile(function(b) return b * 3 end, {mode = "reduce-overhead"})
  local b = tc.randn(16 * 1024 * 1024)
  for _ = 1, 3 do big(b) end
  s0 = stats()
  for _ = 1, 3 do big(b) end
  h.eq(moved_since(s0), 0, "big dropped outputs moved")
  local kept = big(b)
  s0 = stats()
  big(b)
  h.eq(moved_since(s0), 1, "a big kept output is moved")
  h.close_to_eager(kept, b * 3, "big kept output")
  kept, b = nil, nil
  collectgarbage()
end

-- training: the forward's saved activations, consumed by the backward before the next step, are
-- not copied (only what Lua still holds of each step: the loss). `input(i)`: step i's input; the
-- stats as they were before step `from`.
local function step(xx, ww) return (xx:matmul(ww):relu() * ww:mean()):sigmoid():sum() end
local function train(steps, from, input)
  tc.compiler.reset()  -- (graphs of an earlier train() were recorded for other inputs)
  local w = (tc.randn(512, 512) * 0.05):requires_grad_()
  local we = w:detach():clone():requires_grad_()
  local cstep = tc.compile(step, {mode = "reduce-overhead"})
  local before
  for i = 1, steps do
    if i == from then before = stats() end
    local xx = input(i)
    local loss = cstep(xx, w)
    loss:backward()
    local le = step(xx, we)
    le:backward()
    h.close_to_eager(loss, le, "loss of step " .. i)
    h.close_to_eager(w.grad, we.grad, "gradient after step " .. i)
  end
  return before
end
s0 = train(5, 1, function() return tc.randn(512, 512) end)
if on_gpu then
  assert(moved_since(s0) <= 2 * 5, "saved activations were copied: " .. moved_since(s0) .. " storages moved in 5 steps")
end

-- on one input tensor: once recorded (the backward a call after the forward), the backward reads
-- the saved activations where the forward's graph handed them out (its pool) instead of copying
-- them into static buffers (the loss's gradient, a new scalar each step, may be copied)
local x2 = tc.randn(512, 512)
s0 = train(6, 4, function() return x2:copy_(tc.randn(512, 512)) end)
if on_gpu then
  local copied = stats().bytes_copied - s0.bytes_copied
  assert(copied < 1024, "saved activations were copied into static buffers: " .. copied .. " bytes in 3 steps")
end
