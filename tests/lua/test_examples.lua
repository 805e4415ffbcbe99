-- scripts/examples/train.lua runs briefly under tcrun: one progress line per epoch and the loss
-- falling. It needs autograd (loss:backward()); in a build without it the script must stop at
-- once with a clear message, and the training checks are skipped (check.skip).
local check = require "check"
local tc = require "tc"
local T = {}

local TCRUN = os.getenv("TCRUN") or (arg and arg[-1] and arg[-1]:match("tcrun$") and arg[-1]) or "./build/tcrun"

local function run(args)
  local p = assert(io.popen(TCRUN .. " scripts/examples/train.lua " .. args .. " 2>&1; echo \"exit=$?\""))
  local out = p:read("a")
  p:close()
  local body, code = out:match("^(.*)exit=(%d+)\n$")
  return body, tonumber(code)
end

local has_autograd = tc.zeros(1).backward ~= nil

local function epoch_losses(out)
  local losses = {}
  for e, loss in out:gmatch("epoch%s+(%d+)/%d+%s+loss (%d+%.%d+)") do losses[tonumber(e)] = tonumber(loss) end
  return losses
end

function T.train_example_loss_falls_over_epochs()
  local out, code = run("model=mlp epochs=4 steps=15")
  if not has_autograd then
    check.eq(code, 1, out)
    assert(out:find("train.lua needs autograd %(loss:backward%(%)%)"), out)
    check.skip("loss:backward() is not available in this build")
  end
  check.eq(code, 0, out)
  local losses = epoch_losses(out)
  check.eq(#losses, 4, "one progress line per epoch:\n" .. out)
  assert(out:find("step %d+%.%d+ ms"), "the progress line shows the step time:\n" .. out)
  assert(losses[4] < losses[1] * 0.8, "the loss falls:\n" .. out)
end

function T.train_example_cnn_runs()
  if not has_autograd then
    check.skip("loss:backward() is not available in this build")
  end
  local out, code = run("model=cnn epochs=2 steps=4 batch=16 optimizer=sgd")
  check.eq(code, 0, out)
  check.eq(#epoch_losses(out), 2, out)
end

function T.compiled_train_step_gives_the_eager_losses()
  if not has_autograd then check.skip("loss:backward() is not available in this build") end
  local args = "model=cnn epochs=2 steps=3 batch=16 optimizer=sgd backend=eager"
  local eager, c1 = run(args)
  local compiled, c2 = run(args .. " compile=step")
  check.eq(c1, 0, eager)
  check.eq(c2, 0, compiled)
  local le, lc = epoch_losses(eager), epoch_losses(compiled)
  check.eq(#lc, 2, compiled)
  for e = 1, 2 do check.eq(lc[e], le[e], "epoch " .. e .. " loss:\n" .. eager .. compiled) end
end

function T.train_example_rejects_unknown_arguments()
  local out, code = run("epoch=3")
  check.eq(code, 1, out)
  assert(out:find("unknown argument 'epoch=3'"), out)
end

return T
