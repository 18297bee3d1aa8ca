"""Where tests put tensors for Triton kernels: the GPU when there is one, else the CPU (Triton's
interpreter; tests/conftest.py sets TRITON_INTERPRET before any kernel is defined)."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
