"""An InternVL-shaped vision encoder in plain torch, for the encoder-graph benchmarks.

The shape of InternVL's tower (ViT over 448 px tiles in 14 px patches, pixel shuffle
0.5, an MLP projector), at width 64 so it runs on 2 CPU cores. Plain torch, so the
GPU check needs nothing else; random weights (latency does not depend on them).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

TILE, PATCH, WIDTH, LAYERS, HEADS, TEXT_WIDTH = 448, 14, 64, 24, 4, 64
TOKENS_PER_TILE = (TILE // PATCH // 2) ** 2  # 256 after pixel shuffle 0.5


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class InternVLShapedEncoder(nn.Module):
    """tiles [T, 3, 448, 448] -> rows [T * 256, TEXT_WIDTH]."""

    def __init__(self, layers: int = LAYERS, width: int = WIDTH):
        super().__init__()
        self.patch = nn.Conv2d(3, width, PATCH, PATCH)
        self.pos = nn.Parameter(torch.randn(1, (TILE // PATCH) ** 2, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, HEADS) for _ in range(layers))
        self.norm = nn.LayerNorm(4 * width)
        self.mlp = nn.Sequential(nn.Linear(4 * width, TEXT_WIDTH), nn.GELU(), nn.Linear(TEXT_WIDTH, TEXT_WIDTH))

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        x = self.patch(tiles).flatten(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            x = block(x)
        t, n, d = x.shape
        side = int(n**0.5)
        # pixel shuffle 0.5: each 2x2 neighbourhood of patches becomes one token
        x = x.view(t, side // 2, 2, side // 2, 2, d).permute(0, 1, 3, 2, 4, 5).reshape(t, (side // 2) ** 2, 4 * d)
        return self.mlp(self.norm(x)).reshape(t * TOKENS_PER_TILE, TEXT_WIDTH)
