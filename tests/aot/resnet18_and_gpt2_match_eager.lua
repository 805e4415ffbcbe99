-- ResNet-18 (eval: batch norm reads its running stats, which are lifted as buffers) and a tiny
-- GPT-2 (int64 token ids, embeddings, attention, tied head) exported, compiled and loaded: the
-- packages equal eager, with the weights bound by name from the models' state dicts.
local tc = require "tc"
local h = require "helpers"
local R = require "resnet"
local G = require "gpt2"
tc.manual_seed(2)

local net = R.resnet18(10)
net:eval()
local x = tc.randn(2, 3, 32, 32)
local pkg, path, ep = h.round_trip(net, {x})
assert(ep.state_dict["layer1.1.bn1.running_mean"] ~= nil, "batch norm buffers are lifted")
pkg:load_constants(net:state_dict(), {strict = true})
h.close_to_eager(pkg(x), tc.no_grad(function() return net(x) end), "resnet18")
os.remove(path)

local gpt = G.gpt2({vocab_size = 64, n_positions = 16, n_embd = 32, n_layer = 2, n_head = 2})
gpt:eval()
local ids = tc.randint(1, 65, {2, 8})
local gpkg, gpath = h.round_trip(gpt, {ids})
gpkg:load_constants(gpt:state_dict(), {strict = true})
h.close_to_eager(gpkg(ids), tc.no_grad(function() return gpt(ids) end), "gpt2")
os.remove(gpath)
