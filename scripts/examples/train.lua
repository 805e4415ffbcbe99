-- train.lua: trains a small classifier on data it generates, one progress line per epoch.
--   ./build/tcrun scripts/examples/train.lua [model=mlp|cnn] [epochs=8] [steps=25] [batch=64]
--        [optimizer=adamw|sgd|rmsprop] [lr=...] [compile=false|model|step] [mode=default|reduce-overhead]
--        [backend=tc] [seed=0]
--   ./build/tcrun --device=cuda scripts/examples/train.lua model=cnn
-- mlp: points on three interleaved spirals (2-d inputs, 3 classes), Linear-BatchNorm-ReLU-Dropout;
-- cnn: 1x16x16 images of a bar (horizontal, vertical or diagonal) in noise, Conv-BatchNorm-ReLU-
-- MaxPool. The usual loop: zero_grad, forward, cross_entropy, backward, clip_grad_norm_, step;
-- a cosine learning-rate schedule over the epochs; accuracy on held-out data in eval mode.
-- compile=model (or true) runs the model through tc.compile; compile=step compiles the whole
-- training step (zero_grad, forward, loss, backward, clipping, optimizer step) as the
-- torch.compile tutorial's `train` function: the forward is a training entry whose backward is a
-- compiled graph too (docs/architecture.md, "Compiled training"); backward() and the optimizer's
-- step are graph breaks. mode and backend are tc.compile's options.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"

-- key=value arguments
local opt = {model = "mlp", epochs = 8, steps = 25, batch = 64, optimizer = "adamw", seed = 0, compile = "false",
             mode = "default", backend = "tc"}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  if not k or opt[k] == nil and k ~= "lr" then
    error(("train.lua: unknown argument '%s' (expected key=value with key one of model, epochs, steps, batch, "
      .. "optimizer, lr, compile, mode, backend, seed)"):format(a), 0)
  end
  opt[k] = tonumber(v) or v
end
local device = tc.get_default_device()

if tc.zeros(1).backward == nil then
  error("train.lua needs autograd (loss:backward()), which this build of tc does not have yet", 0)
end
tc.manual_seed(opt.seed)

-- ---- data ---------------------------------------------------------------------------------------
-- n points on three spirals with noise: inputs (n, 2), labels 1..3.
local function spirals(n)
  local y = tc.randint(1, 4, {n})
  local t = tc.rand(n) * 3 + 0.3
  local angle = t * 1.6 + (y - 1):float() * (2 * math.pi / 3)
  local x = tc.stack({t * angle:cos(), t * angle:sin()}, 2) + tc.randn(n, 2) * 0.08
  return x, y
end

-- n 16x16 images: a bar through a random offset, horizontal (1), vertical (2) or diagonal (3).
local function bars(n)
  local y = tc.randint(1, 4, {n})
  local r = tc.arange(16):view(16, 1):expand(16, 16):float()
  local c = tc.arange(16):view(1, 16):expand(16, 16):float()
  local off = (tc.rand(n) * 10 + 3):floor():view(n, 1, 1)
  local kind = y:view(n, 1, 1)
  local line = tc.where(kind:eq(1), (r - off):abs(), tc.where(kind:eq(2), (c - off):abs(), (r - c - off + 8):abs()))
  local img = (1 - line / 1.5):clamp(0, 1) + tc.randn(n, 16, 16) * 0.3
  return img:view(n, 1, 16, 16), y
end

local make_data = opt.model == "cnn" and bars or spirals
local n_train = opt.steps * opt.batch
local x_train, y_train = make_data(n_train)
local x_test, y_test = make_data(512)
x_train, y_train, x_test, y_test = x_train:to(device), y_train:to(device), x_test:to(device), y_test:to(device)

-- ---- model --------------------------------------------------------------------------------------
local model
if opt.model == "cnn" then
  model = nn.Sequential(
    nn.Conv2d(1, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, {padding = 1}), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(16, 3))
elseif opt.model == "mlp" then
  model = nn.Sequential(
    nn.Linear(2, 64), nn.BatchNorm1d(64), nn.ReLU(),
    nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1),
    nn.Linear(64, 3))
else
  error("train.lua: model must be mlp or cnn, got " .. tostring(opt.model), 0)
end
model:to(device)
local compile_opts = {mode = opt.mode, backend = opt.backend}
local forward = model
if opt.compile == "true" or opt.compile == true or opt.compile == "model" then
  forward = tc.compile(model, compile_opts)
elseif opt.compile ~= "false" and opt.compile ~= false and opt.compile ~= "step" then
  error("train.lua: compile must be false, model or step, got " .. tostring(opt.compile), 0)
end

local optimizers = {
  adamw = function(ps) return optim.AdamW(ps, {lr = opt.lr or 1e-2, weight_decay = 1e-4}) end,
  sgd = function(ps) return optim.SGD(ps, {lr = opt.lr or 0.1, momentum = 0.9, nesterov = true}) end,
  rmsprop = function(ps) return optim.RMSprop(ps, {lr = opt.lr or 3e-3}) end,
}
if not optimizers[opt.optimizer] then error("train.lua: optimizer must be adamw, sgd or rmsprop", 0) end
local optimizer = optimizers[opt.optimizer](model:parameters())
local scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, opt.epochs, {eta_min = 1e-4})

local function sync() if device:sub(1, 4) == "cuda" then tc.cuda.synchronize() end end

local function accuracy()
  model:eval()
  local correct = tc.no_grad(function() return forward(x_test):argmax(2):eq(y_test):sum():item() end)
  model:train()
  return 100 * correct / y_test:size(1)
end

-- ---- training -----------------------------------------------------------------------------------
local function train_step(xb, yb)
  optimizer:zero_grad()
  local loss = F.cross_entropy(forward(xb), yb)
  loss:backward()
  nn.utils.clip_grad_norm_(model:parameters(), 5.0)
  optimizer:step()
  return loss
end
if opt.compile == "step" then train_step = tc.compile(train_step, compile_opts) end

local n_params = 0
for _, p in ipairs(model:parameters()) do n_params = n_params + p:numel() end
print(("training %s (%d parameters) on %s: %d epochs x %d steps of batch %d, %s"):format(
  opt.model, n_params, device, opt.epochs, opt.steps, opt.batch, opt.optimizer))

local first_loss, last_loss
for epoch = 1, opt.epochs do
  local _, order = tc.rand(n_train):sort()
  order = order:to(device)
  local total = tc.zeros(1, {device = device})
  sync()
  local t0 = tc.utils.perf_counter()
  for step = 1, opt.steps do
    local idx = order:narrow(1, (step - 1) * opt.batch + 1, opt.batch)
    local xb, yb = x_train:index_select(1, idx), y_train:index_select(1, idx)
    total:add_(train_step(xb, yb):detach())
  end
  sync()
  local step_ms = (tc.utils.perf_counter() - t0) * 1000 / opt.steps
  local lr = scheduler:get_last_lr()[1]
  scheduler:step()
  local mean_loss = total:item() / opt.steps
  first_loss = first_loss or mean_loss
  last_loss = mean_loss
  print(("epoch %2d/%d  loss %.4f  test accuracy %5.1f%%  step %.2f ms  lr %.5f"):format(
    epoch, opt.epochs, mean_loss, accuracy(), step_ms, lr))
end
print(("loss %.4f -> %.4f"):format(first_loss, last_loss))
