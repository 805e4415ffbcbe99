-- Indexing a userdata that is not a tensor (an io file) reads through its metatable's __index as
-- Lua does (guarded), so `io.stdout:write(...)` is a call at a break and the rest of the function
-- resumes compiled (the index broke and the rest of the frame ran uncompiled).
local tc = require "tc"
local h = require "helpers"

local function log(x)
  local w = io.stdout.write
  io.stdout:write("")
  return x + 1, w == io.stdout.write
end
local v, same = tc.compile(log)(1)
h.eq(v, 2, "result")
h.eq(same, true, "method read through the metatable")
local s = h.stats()
h.eq(s.graph_breaks, 1, "one break: the write call")
h.eq(s.traces, 2, "the function, then its resume function after the call")
