-- tc.cuda.stream(s, fn, ...): runs fn(...) with s as the current stream of its device and restores
-- the previous stream afterwards, also when fn raises (the to-be-closed form is tc.cuda.use_stream).
local tc, _, C = ...
local use_stream = tc.cuda.use_stream

function tc.cuda.stream(s, fn, ...)
  local _ <close> = use_stream(s)
  if type(fn) ~= "function" then
    C.raise("ValueError", ("tc.cuda.stream(s, fn): fn must be a function, got %s"):format(type(fn)))
  end
  return fn(...)
end
