"""GPU debug: triton-emulation vs the reference, varying weight format, tiles and pipelining."""
import torch
import kernels.triton.linear_emulation as le
from kernels.base import load_kernel
from kernels.dispatch import activation_qdq
from kernels.mx import mx_dequantize
from registry.contract import SchemeContract, QuantKey

k = load_kernel("triton-emulation")
torch.manual_seed(0)
orig = dict(le.GPU_TILES)
variants = {"default": orig,
            "stages1": {n: t[:4] + (1,) for n, t in orig.items()},
            "stages2": {n: t[:4] + (2,) for n, t in orig.items()},
            "warps8": {n: t[:3] + (8, t[4]) for n, t in orig.items()}}
for afmt in ["mxfp4", "mxfp8_e4m3", "mxint8"]:
    for wfmt in ["mxfp4", "mxfp8_e4m3", "mxint8"]:
        c = SchemeContract(weight=QuantKey.mx(wfmt, rounding="even", static=True),
                           activation=QuantKey.mx(afmt, rounding="even", static=False))
        M, N, K = 16, 256, 512
        w = torch.randn(N, K, device="cuda")
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        p = k.prepare(w, c)
        wd = mx_dequantize(p.weight, torch.float32, backend="reference")
        xq = activation_qdq(c.activation, backend="reference")(x, None).float()
        ref = xq @ wd.T
        row = []
        for name, tiles in variants.items():
            le.GPU_TILES.clear(); le.GPU_TILES.update(tiles)
            for m in (M, 64):
                xx = x if m == M else x.repeat(4, 1)
                got = le.fused_linear(xx, p, out_dtype=torch.float32)[:M]
                row.append(f"{name}/M{m}={float((got - ref).norm() / ref.norm()):.1e}")
        le.GPU_TILES.clear(); le.GPU_TILES.update(orig)
        # two-step control: triton qdq then weight-only fused
        cw = SchemeContract(weight=c.weight, activation=None)
        pw = k.prepare(w, cw)
        xq_t = activation_qdq(c.activation, backend="triton")(x, None)
        got2 = le.fused_linear(xq_t, pw, out_dtype=torch.float32)
        row.append(f"twostep={float((got2 - ref).norm() / ref.norm()):.1e}")
        print(f"A={afmt} W={wfmt}: " + " ".join(row), flush=True)
