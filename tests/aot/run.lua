-- The AOT package tests: `tcrun tests/aot/run.lua [PATTERN]` from the repository root. Each other
-- tests/aot/*.lua file is a script that raises on failure; the runner and helpers are capture's.
package.path = "tests/capture/?.lua;" .. package.path
arg[0] = "tests/aot/run.lua"
dofile("tests/capture/run.lua")
