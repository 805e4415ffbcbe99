"""The PyTorch twins of scripts/models' seed model (Layer, SeedModel), MyModule and GPT-2 (Block,
GPT2), shared by the bench/peer_torch_*.py scripts (torchvision provides ResNet and DenseNet)."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1, self.relu1 = nn.Linear(10, 10), nn.ReLU()
        self.linear2, self.relu2 = nn.Linear(10, 10), nn.ReLU()

    def forward(self, x):
        return self.relu2(self.linear2(torch.sigmoid(self.relu1(self.linear1(x)))))


class SeedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 10)
        self.layers = nn.ModuleList([Layer() for _ in range(64)])

    def forward(self, x):
        x = self.linear(x)
        for layer in self.layers:
            x = layer(x)
        return x


class MyModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(100, 10)

    def forward(self, x):
        return F.relu(self.lin(x))


class Block(nn.Module):  # GPT-2 block, as scripts/models/gpt2.lua
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        sh = lambda t: t.view(B, T, self.h, C // self.h).transpose(1, 2)
        q, k, v = sh(q), sh(k), sh(v)
        att = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(C // self.h))
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1), float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, n_pos=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_pos, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)
