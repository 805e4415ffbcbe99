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

-- scripts/examples/seed003_inception.lua: seed 003's benchmark at CPU size, eager then compiled through
-- tc.Trainer with the Benchmark callback
function T.seed003_example_times_inception_eager_and_compiled_and_prints_the_speedup()
  if not has_autograd then check.skip("loss:backward() is not available in this build") end
  local out, code = check.run(check.TCRUN .. " scripts/examples/seed003_inception.lua --batch 2 --size 75 --steps 3 --classes 10")
  check.eq(code, 0, out)
  local eager = tonumber(out:match("Eager median time: (%d+%.%d+) seconds"))
  local compiled = tonumber(out:match("Compile median time: (%d+%.%d+) seconds"))
  assert(eager and compiled and eager > 0 and compiled > 0, out)
  assert(out:find("Speedup: %d+%.%dx"), out)
  assert(out:find("compiled training_step in"), "the Trainer compiled the training step:\n" .. out)
  assert(out:find("1 traces, 0 recompiles, 0 graph breaks"), out)
  local bad, c2 = check.run(check.TCRUN .. " scripts/examples/seed003_inception.lua --size 64")
  check.eq(c2, 1, bad)
  assert(bad:find("needs %-%-size 75 or more"), bad)
end

-- scripts/examples/char_gpt.lua: a character-level GPT on its generated corpus, validation, checkpoints
-- (the best one reloaded gives its validation loss again) and sampled text
function T.char_gpt_example_trains_checkpoints_and_samples()
  if not has_autograd then check.skip("loss:backward() is not available in this build") end
  local dir = check.tmpdir()
  local out, code = check.run(check.TCRUN .. " scripts/examples/char_gpt.lua --steps 40 --val_every 20 --sample 60 --dir " .. dir)
  check.eq(code, 0, out)
  local best = out:match("%(best (%d+%.%d+)%)")
  assert(best, out)
  check.eq(out:match("best checkpoint reloaded: val_loss (%d+%.%d+)"), best, "the reloaded best checkpoint:\n" .. out)
  assert(tonumber(best) < 3.0, "the validation loss fell below uniform over the vocabulary (ln 28 = 3.33):\n" .. out)
  local files = check.ls(dir .. "/checkpoints")
  check.eq(#files, 2, table.concat(files, " "))
  check.eq(files[1], "epoch=0-step=40-val_loss=" .. best .. ".safetensors")
  check.eq(files[2], "last.safetensors")
  local sample = out:match("%-%-%-%- sample %-%-%-%-\n(.*)$")
  assert(sample and #sample >= 60, out)
  local missing, c2 = check.run(check.TCRUN .. " scripts/examples/char_gpt.lua --text /nonexistent/x.txt")
  check.eq(c2, 1, missing)
  assert(missing:find("cannot read %-%-text"), missing)
end

-- scripts/examples/resnet_ddp.lua: a tiny ResNet-18 on generated images with DDP on 2 gloo ranks, started
-- by the Trainer itself (--devices 2, DataLoader workers) and by tcrun --nproc-per-node 2 (compiled):
-- both ranks run, rank 0 alone prints the epoch's loss and accuracy, the ranks end with equal
-- parameters, and rank 0 writes the best and the last checkpoint
function T.resnet_ddp_example_trains_on_two_ranks_with_equal_parameters_and_checkpoints()
  if not has_autograd then check.skip("loss:backward() is not available in this build") end
  local tiny = " --size 16 --width 4 --classes 4 --samples 32 --val_samples 16 --batch 4 --epochs 1"
  for _, how in ipairs({{launch = " scripts/examples/resnet_ddp.lua --devices 2 --workers 2", started = true},
                        {launch = " --nproc-per-node 2 scripts/examples/resnet_ddp.lua --workers 0 --compile 1"}}) do
    local dir = check.tmpdir()
    local out, code = check.run(check.TCRUN .. how.launch .. tiny .. " --dir " .. dir)
    check.eq(code, 0, out)
    check.eq(out:find("starting 2 processes", 1, true) ~= nil, how.started == true, out)
    for r = 0, 1 do assert(out:find(("rank %d of 2: resnet18 on cpu, 4 training batches of 4"):format(r), 1, true), out) end
    local _, epochs = out:gsub("\nepoch 0: train_loss %d+%.%d+, val_loss %d+%.%d+, val_acc %d%.%d+, %d+%.%d images/s %(2 ranks%)", "")
    check.eq(epochs, 1, "rank 0 alone prints the epoch:\n" .. out)
    assert(out:find("largest difference to rank 0's 0\n", 1, true), "equal parameters on both ranks:\n" .. out)
    assert(out:find("done: 4 steps"), out)
    local files = check.ls(dir .. "/checkpoints")
    check.eq(#files, 2, table.concat(files, " "))
    assert(files[1]:match("^epoch=0%-step=4%-val_acc=%d%.%d+%.safetensors$"), files[1])
    check.eq(files[2], "last.safetensors")
  end
end

-- scripts/examples/generated_images.lua: item i depends on (seed, offset + i) alone, so worker threads give
-- the batches of num_workers = 0; without augmentation an item is its class template's centre crop plus
-- one of the noise bank's
function T.generated_images_are_the_same_in_worker_threads_and_validation_items_are_centre_crops()
  package.path = "scripts/examples/?.lua;" .. package.path
  local GeneratedImages = require "generated_images"
  local data = tc.utils.data
  local ds = GeneratedImages(12, {classes = 3, size = 8, pad = 2, seed = 5})
  local function batches(w)
    local out = {}
    for b in data.DataLoader(ds, {batch_size = 4, shuffle = true, seed = 1, num_workers = w}) do out[#out + 1] = b end
    return out
  end
  local a, b = batches(0), batches(2)
  check.eq(#b, 3)
  for k = 1, 3 do
    assert(tc.equal(a[k].image, b[k].image) and tc.equal(a[k].label, b[k].label), "batch " .. k)
    check.eq(tostring(a[k].image:size()), tostring(tc.Size({4, 3, 8, 8})))
  end
  check.eq(tc.equal(ds:get(3).image, ds:get(3).image), true)
  local val = GeneratedImages(12, {classes = 3, size = 8, pad = 2, seed = 5, offset = 12, augment = false})
  local item = val:get(1)
  local centre = val.templates[item.label]:narrow(2, 3, 8):narrow(3, 3, 8)
  local found = false
  for j = 1, val.bank do
    if tc.allclose(item.image, centre + val.noises[j]:narrow(2, 3, 8):narrow(3, 3, 8)) then found = true end
  end
  assert(found, "a validation item is a centre crop")
end

return T
