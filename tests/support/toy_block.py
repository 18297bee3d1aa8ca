"""A toy transformer block (the model the quantize / checkpoint tests replace layers in), its
seeded inputs, and the names of its Linear layers in module order."""
from __future__ import annotations

import torch
from torch import nn

LINEARS = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.0", "mlp.2", "lm_head"]


class Block(nn.Module):
    """A toy pre-norm transformer block with an output head."""

    def __init__(self, d: int = 64, vocab: int = 40):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.ModuleDict({"q": nn.Linear(d, d), "k": nn.Linear(d, d),
                                   "v": nn.Linear(d, d), "o": nn.Linear(d, d, bias=False)})
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        q, k, v = self.attn["q"](h), self.attn["k"](h), self.attn["v"](h)
        att = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
        x = x + self.attn["o"](att @ v)
        x = x + self.mlp(x)
        return self.lm_head(x)


def make_block(seed: int) -> Block:
    torch.manual_seed(seed)
    return Block()


def inputs(seed: int, shape=(2, 5, 64)) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def is_static(scheme) -> bool:
    return scheme.activation is not None and scheme.activation.static
