-- A trace that walks a long chain of tables and writes to each (DeltaBlue's constraint chain)
-- guards their aliasing with one guard over every table read, not one per (table read, table
-- written) pair: 300 nodes made about 90,000 pairs, each with a description walking the chain.
-- The one guard still tells exactly which tables may alias: a written table aliasing another
-- recompiles, two tables only read aliasing each other do not.
local tc = require "tc"
local h = require "helpers"

local N = 300
local function chain(n)
  local head
  for i = n, 1, -1 do head = {value = i, mark = 0, next = head} end
  return head
end
-- marks every node and sums the values: reads and writes every table of the chain
local function mark_all(head, mark)
  local n, sum = head, 0
  while n do
    n.mark = mark
    sum = sum + n.value
    n = n.next
  end
  return sum
end

local cf = tc.compile(mark_all)
local a = chain(N)
h.eq(cf(a, 1), N * (N + 1) // 2, "sum over the chain")
h.eq(a.next.next.mark, 1, "writes done")
local s = h.stats()
h.eq(s.traces, 1, "one trace")
-- each node: a type guard for itself (and its value's), and one aliasing guard for all of them
assert(s.max_guards < 4 * N, "guards of the entry grow with the chain, not its square: " .. s.max_guards)
a = chain(N)  -- (the trace read each mark before writing it: a fresh chain, marks 0 again)
h.eq(cf(a, 1), N * (N + 1) // 2, "second call")
h.eq(a.next.next.mark, 1, "second call's writes")
h.eq(h.stats().traces, 1, "a cache hit")

-- A written table aliasing another argument: a new entry, with eager's answer. (Every v is 1 on
-- entry, so that only the aliasing differs between calls.)
local function bump(w, r1, r2)
  w.v = w.v + 1
  return r1.v * 10 + r2.v
end
local cb = tc.compile(bump)
-- (which of w, r1, r2 are one table: 1 2 3 all distinct, 1 1 3 r1 is w ...), eager's result,
-- traces so far
local cases = {
  {{1, 2, 3}, 11, 1, "distinct tables"},
  {{1, 2, 2}, 11, 1, "the tables only read alias each other: the same entry"},
  {{1, 1, 3}, 21, 2, "the written table is the first one read: it sees the write"},
  {{1, 2, 1}, 12, 3, "the written table is the second one read"},
  {{1, 1, 1}, 22, 4, "all three one table"},
  {{1, 1, 3}, 21, 4, "back to the first alias: its entry"},
  {{1, 2, 3}, 11, 4, "distinct again: the first entry"},
}
local base = h.stats().traces
for _, c in ipairs(cases) do
  local tables = {{v = 1}, {v = 1}, {v = 1}}  -- every v is 1: only the aliasing differs
  h.eq(cb(tables[c[1][1]], tables[c[1][2]], tables[c[1][3]]), c[2], c[4])
  h.eq(h.stats().traces - base, c[3], c[4] .. ": entries traced")
end

-- The same root table on every call (the guards' fast path memoizes it): an alias made inside it
-- between calls is seen.
local function through(t)
  t.p.x = 5
  return t.q.x
end
local ct = tc.compile(through)
local A, Bt = {x = 1}, {x = 7}
local t = {p = A, q = Bt}
local fast = h.stats().guard_fast_hits
for _ = 1, 4 do h.eq(ct(t), 7, "distinct p and q") end
assert(h.stats().guard_fast_hits > fast, "the fast path served some of those calls")
t.q = A
A.x = 1
h.eq(ct(t), 5, "q is now p: the write is seen")
h.eq(ct(t), 5, "and again")
