-- char_gpt.lua: a character-level GPT (scripts/models/gpt2.lua's architecture, tiny) trained on a text
-- file through tc.utils.data and tc.Trainer, with a validation loss, ModelCheckpoint keeping the best
-- and the last checkpoint, and text sampled at the end from the best checkpoint.
--   ./build/tcrun scripts/examples/char_gpt.lua                      (a small generated corpus, CPU, seconds)
--   ./build/tcrun scripts/examples/char_gpt.lua --text input.txt --device cuda --block 128 --batch 64 \
--        --layers 4 --heads 4 --embd 256 --steps 3000 --compile 1
-- Options: --text PATH (default: a generated corpus in a temporary file), --device cpu|cuda, --block N
-- (context length), --batch N, --layers N, --heads N, --embd N, --steps N (optimizer steps), --lr X,
-- --val_every N (validation every N training batches), --val_batches N, --compile 0|1 (tc.compile the
-- module: the Trainer compiles its steps), --dir DIR (checkpoints and metrics.csv; default a temporary
-- directory), --sample N (characters to generate), --temperature X, --seed N.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local L = require "tc.trainer"
local data = tc.utils.data
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = here .. "/../models/?.lua;" .. package.path
local gpt2 = require "gpt2"
local common = require "common"

local opt = common.options("char_gpt.lua", {text = "", device = "cpu", block = 32, batch = 16, layers = 2, heads = 2,
  embd = 64, steps = 400, lr = 5e-3, val_every = 50, val_batches = 4, compile = 0, dir = "", sample = 200,
  temperature = 0.8, seed = 0})
if opt.device == "cuda" and not tc.cuda.is_available() then error("char_gpt.lua: no CUDA device", 0) end
if opt.embd % opt.heads ~= 0 then error("char_gpt.lua: --embd must be a multiple of --heads", 0) end
tc.set_default_device(opt.device)
tc.manual_seed(opt.seed)

local function tmpname() local p = os.tmpname(); os.remove(p); return p end

-- ---- the text ---------------------------------------------------------------------------------------
-- A default corpus with structure a tiny model learns in a minute: sentences from a small grammar.
local function generated_corpus(path)
  local rng = tc.utils.data.Generator(opt.seed + 1)
  local function pick(t) return t[rng:random(#t)] end
  local subjects = {"the cat", "the dog", "a bird", "my friend", "the old man", "a child", "the farmer"}
  local verbs = {"sat on", "looked at", "ran to", "walked past", "jumped over", "slept under"}
  local objects = {"the mat", "the tree", "a red box", "the river", "the green hill", "the house"}
  local ends = {".", ".", ".", "!", " again."}
  local lines = {}
  for i = 1, 600 do
    lines[i] = ("%s %s %s%s"):format(pick(subjects), pick(verbs), pick(objects), pick(ends))
  end
  local f = assert(io.open(path, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end

local text_path = opt.text
if text_path == "" then
  text_path = tmpname() .. ".txt"
  generated_corpus(text_path)
end
local f, err = io.open(text_path, "rb")
if not f then error("char_gpt.lua: cannot read --text " .. tostring(err), 0) end
local text = f:read("a")
f:close()
if opt.text == "" then os.remove(text_path) end
if #text < 4 * (opt.block + 1) then error(("char_gpt.lua: %s is too short for --block %d"):format(text_path, opt.block), 0) end

-- the vocabulary: the bytes that occur, sorted; ids are 1-based
local chars, stoi = {}, {}
for c in text:gmatch(".") do if not stoi[c] then stoi[c] = true; chars[#chars + 1] = c end end
table.sort(chars)
for i, c in ipairs(chars) do stoi[c] = i end
local ids = {}
for i = 1, #text do ids[i] = stoi[text:sub(i, i)] end
local tokens = tc.tensor(ids, {dtype = tc.int64})
print(("text: %s, %d characters, vocabulary of %d"):format(opt.text == "" and "generated corpus" or text_path, #text, #chars))

-- ---- data: windows of block+1 characters; the first 90 % trains, the rest validates -----------------
local Windows = data.Dataset:extend("Windows")
function Windows:__init(t, block) self.t, self.block = t, block end
function Windows:__len() return self.t:size(1) - self.block end
function Windows:get(i)
  local w = self.t:narrow(1, i, self.block + 1)
  return {x = w:narrow(1, 1, self.block), y = w:narrow(1, 2, self.block)}
end
local n_train = math.floor(#text * 0.9)
local train_set = Windows(tokens:narrow(1, 1, n_train), opt.block)
local val_set = Windows(tokens:narrow(1, n_train + 1, #text - n_train), opt.block)
-- drop_last keeps every batch the same shape (a compiled step does not recompile for a ragged batch)
local train_loader = data.DataLoader(train_set, {batch_size = opt.batch, shuffle = true, seed = opt.seed, drop_last = true})
local val_loader = data.DataLoader(val_set, {batch_size = opt.batch, drop_last = true})

-- ---- the module -------------------------------------------------------------------------------------
local CharGPT = L.LightningModule:extend("CharGPT")
function CharGPT:__init()
  self.gpt = gpt2.GPT2({vocab_size = #chars, n_positions = opt.block, n_embd = opt.embd, n_layer = opt.layers,
                        n_head = opt.heads})
end
function CharGPT:forward(x) return self.gpt(x) end
function CharGPT:loss(batch)
  local logits = self(batch.x)
  return F.cross_entropy(logits:reshape(-1, logits:size(3)), batch.y:reshape(-1))
end
function CharGPT:training_step(batch)
  local loss = self:loss(batch)
  self:log("train_loss", loss, {prog_bar = true})
  return loss
end
function CharGPT:validation_step(batch) self:log("val_loss", self:loss(batch), {prog_bar = true}) end
function CharGPT:configure_optimizers()
  local o = tc.optim.AdamW(self:parameters(), {lr = opt.lr, weight_decay = 0.01})
  return {optimizer = o, lr_scheduler = {scheduler = tc.optim.lr_scheduler.CosineAnnealingLR(o, opt.steps),
                                         interval = "step"}}
end

-- ---- training -----------------------------------------------------------------------------------------
local dir = opt.dir ~= "" and opt.dir or tmpname()
local checkpoint = L.ModelCheckpoint{dirpath = dir .. "/checkpoints", monitor = "val_loss", save_top_k = 1, save_last = true}
local trainer = tc.Trainer{max_steps = opt.steps, val_check_interval = math.min(opt.val_every, #train_loader),
  limit_val_batches = opt.val_batches, num_sanity_val_steps = 1, callbacks = {checkpoint}, default_root_dir = dir,
  log_every_n_steps = 10}
local model = CharGPT()
trainer:fit(opt.compile ~= 0 and tc.compile(model) or model, train_loader, val_loader)
print(("val_loss %.4f (best %.4f), checkpoints: %s, %s"):format(trainer.callback_metrics.val_loss,
  checkpoint.best_model_score, checkpoint.best_model_path, checkpoint.last_model_path))

-- ---- sampling from the best checkpoint -----------------------------------------------------------------
local best = CharGPT()
trainer:load_checkpoint(best, checkpoint.best_model_path)
print(("best checkpoint reloaded: val_loss %.4f"):format(trainer:validate(best, val_loader).val_loss))
best:eval()
local function sample(prompt, n)
  local _ <close> = tc.no_grad()
  local out = {}
  for c in prompt:gmatch(".") do out[#out + 1] = stoi[c] or 1 end
  for _ = 1, n do
    local first = math.max(1, #out - opt.block + 1)
    local ctx = tc.tensor({table.move(out, first, #out, 1, {})}, {dtype = tc.int64})
    local logits = best(ctx)[1][ctx:size(2)] / opt.temperature
    out[#out + 1] = tc.multinomial(tc.softmax(logits, 1), 1):item()
  end
  local s = {}
  for i, id in ipairs(out) do s[i] = chars[id] end
  return table.concat(s)
end
local prompt = text:sub(1, 1)
print("---- sample ----")
print(sample(prompt, opt.sample))
