"""Rank and similarity statistics for tools/accuracy_minilm.py, in torch (no scipy): Spearman
with average-tie ranks, and the cosine / pairwise-similarity comparison of two embedding sets."""
from __future__ import annotations

import torch
from torch import Tensor


def average_ranks(x: Tensor) -> Tensor:
    """1-based ranks of a 1-D tensor; tied values share the mean of their ranks (float64)."""
    x = x.detach().double().flatten().cpu()
    if x.numel() == 0 or torch.isnan(x).any():
        raise ValueError(f"average_ranks needs a non-empty tensor without NaN, got {x.numel()} "
                         f"values ({int(torch.isnan(x).sum())} NaN)")
    order = torch.argsort(x, stable=True)
    ordered = x[order]
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = torch.cumsum(starts.long(), 0) - 1
    counts = torch.bincount(group).double()
    first = torch.cumsum(counts, 0) - counts  # 0-based position where each group starts
    ranks = torch.empty_like(x)
    ranks[order] = (first + (counts + 1) / 2)[group]
    return ranks


def pearson(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two equal-length 1-D tensors (float64); constant input: error."""
    a, b = a.double().flatten().cpu(), b.double().flatten().cpu()
    if a.shape != b.shape or a.numel() < 2:
        raise ValueError(f"pearson needs two tensors of one length >= 2, got {a.numel()} and "
                         f"{b.numel()} values")
    da, db = a - a.mean(), b - b.mean()
    denom = torch.sqrt((da * da).sum() * (db * db).sum())
    if denom == 0:
        raise ValueError("pearson: an input is constant, so the correlation is undefined")
    return float((da * db).sum() / denom)


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman's rank correlation: Pearson of the average-tie ranks."""
    return pearson(average_ranks(a), average_ranks(b))


def upper_triangle(m: Tensor) -> Tensor:
    """The entries above the diagonal of a square matrix, row by row."""
    if m.dim() != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"upper_triangle needs a square matrix, got shape {tuple(m.shape)}")
    i, j = torch.triu_indices(m.shape[0], m.shape[0], offset=1)
    return m[i, j]


def compare(reference: Tensor, embeddings: Tensor) -> dict[str, float]:
    """Per-sentence cosine to the reference (mean, min) and the Spearman correlation of the
    two pairwise-similarity matrices."""
    if reference.shape != embeddings.shape or reference.dim() != 2:
        raise ValueError(f"compare needs two [sentences, dim] tensors of one shape, got "
                         f"{tuple(reference.shape)} and {tuple(embeddings.shape)}")
    ref = torch.nn.functional.normalize(reference.double().cpu(), dim=-1)
    emb = torch.nn.functional.normalize(embeddings.double().cpu(), dim=-1)
    if not torch.isfinite(emb).all():
        raise ValueError("the quantized embeddings hold NaN or Inf")
    cos = (ref * emb).sum(-1)
    rho = spearman(upper_triangle(ref @ ref.T), upper_triangle(emb @ emb.T))
    return {"mean_cos": float(cos.mean()), "min_cos": float(cos.min()), "spearman": rho}
