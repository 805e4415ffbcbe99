-- A GPT-2-architecture decoder: token + position embeddings, pre-LayerNorm blocks of causal
-- self-attention and a GELU (tanh) MLP, a final LayerNorm and an LM head tied to the token
-- embedding. Parameter names follow Hugging Face's GPT2LMHeadModel (transformer.h.1.attn.c_attn
-- ...), with nn.Linear weights ([out, in], i.e. transposed relative to HF's Conv1D).
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
-- this folder on package.path, so `tcrun scripts/models/gpt2.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}
M.small = {vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12}

local Attention = nn.Module:extend("GPT2Attention")
function Attention:__init(cfg)
  self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
  self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
  self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
end
function Attention:forward(x)
  local B, T, C = x:size(1), x:size(2), self.n_embd
  local qkv = self.c_attn(x):split(C, 3)
  local function heads(t) return t:view(B, T, self.n_head, C // self.n_head):transpose(2, 3) end
  local y = F.scaled_dot_product_attention(heads(qkv[1]), heads(qkv[2]), heads(qkv[3]), {is_causal = true})
  return self.c_proj(y:transpose(2, 3):reshape(B, T, C))
end

local MLP = nn.Module:extend("GPT2MLP")
function MLP:__init(cfg)
  self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
  self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
end
function MLP:forward(x) return self.c_proj(tc.gelu(self.c_fc(x), {approximate = "tanh"})) end

local Block = nn.Module:extend("GPT2Block")
function Block:__init(cfg)
  self.ln_1 = nn.LayerNorm(cfg.n_embd)
  self.attn = Attention(cfg)
  self.ln_2 = nn.LayerNorm(cfg.n_embd)
  self.mlp = MLP(cfg)
end
function Block:forward(x)
  x = x + self.attn(self.ln_1(x))
  return x + self.mlp(self.ln_2(x))
end

local Transformer = nn.Module:extend("GPT2Model")
function Transformer:__init(cfg)
  self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
  self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
  local blocks = {}
  for i = 1, cfg.n_layer do blocks[i] = Block(cfg) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(cfg.n_embd)
end

local GPT2 = nn.Module:extend("GPT2LMHeadModel")
-- cfg: vocab_size, n_positions, n_embd, n_layer, n_head (defaults: GPT-2 small)
function GPT2:__init(cfg)
  cfg = cfg or {}
  for k, v in pairs(M.small) do if cfg[k] == nil then cfg[k] = v end end
  self.config = cfg
  self.transformer = Transformer(cfg)
  -- GPT-2's initialisation: N(0, 0.02) for embeddings and linear weights, zero biases
  for _, p in self:named_parameters() do
    if p:dim() == 2 then p:normal_(0, 0.02) end
  end
end
-- ids: int64 [B, T] of 1-based token ids -> logits [B, T, vocab]
function GPT2:forward(ids)
  local T = ids:size(2)
  local pos = tc.arange(1, T + 1, 1, {dtype = tc.int64, device = ids.device})
  local tr = self.transformer
  local x = tr.wte(ids) + tr.wpe(pos)
  for _, block in ipairs(tr.h) do x = block(x) end
  x = tr.ln_f(x)
  return F.linear(x, tr.wte.weight)  -- tied LM head
end

M.GPT2 = GPT2
function M.gpt2(cfg) return GPT2(cfg) end

function M.main()
  local cfg = {n_layer = tonumber(arg[1]) or 12}
  local model = GPT2(cfg)
  local ids = tc.randint(1, model.config.vocab_size + 1, {2, 64})
  common.time_forward("gpt2 (" .. cfg.n_layer .. " layers)", model, ids)
end

if common.is_main("gpt2.lua") then M.main() end
return M
