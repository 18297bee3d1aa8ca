"""Time the peer MXFP4 kernel a vLLM user would pick beside ours and bf16 F.linear, in one run.

    python tools/bench_peer.py [--peer humming] [--shapes 8192x8192] [--m 1,16,4096] [--out F]

Issue 14 measures us against vLLM's Hopper MXFP4 kernel (humming-kernels, on PyPI: CUDA
compiled through NVRTC at first use). This runs `registry bench`'s runner on `w_mxfp4` (our
resolved kernel and bf16 `F.linear`, each checked and timed by its rules), then builds the peer
from the SAME MX codes and scales (`mx_quantize` with the scheme's weight rounding), checks its
output against `reference-emulation` on the first rows (a wrong peer is marked FAIL and never
timed), and times it by the same graph / eager / loop rules against the same bf16 figures.
The peer is optional: without it installed this says so in one line and exits 2.
On a CPU, `--peer reference` (dequantize + F.linear) checks the logic only. On the lent GPU
(no package index there) carry the wheel in .whl/ (tools/device_wheels.sh installs it):
`python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux_2_28_x86_64 -d .whl humming-kernels==0.1.19`; its needs (cuda-bindings, jinja2, ...)
are in the image. tools/gpu_figures.sh runs this beside `registry bench`.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.base import load_kernel  # noqa: E402
from kernels.mx import MXTensor, mx_dequantize, mx_quantize  # noqa: E402
from registry.cli.bench import parse_grid  # noqa: E402
from registry.files.catalog import load_schemes  # noqa: E402
from registry.machine import bench  # noqa: E402
from registry.machine.bench_rows import judge, mark_raised  # noqa: E402
from registry.machine.timing import _copies_needed  # noqa: E402

SCHEME = "w_mxfp4"
Linear = Callable[[torch.Tensor], torch.Tensor]


class PeerMissing(RuntimeError):
    """The peer's package cannot be imported or cannot run here."""


def _ocp_mxfp4(mx: MXTensor, who: str) -> None:
    if mx.fmt != "mxfp4" or mx.layout != "packed" or mx.data.dim() != 2:
        raise ValueError(f"{who}: needs a 2-D mxfp4 weight in the packed layout (two codes a "
                         f"byte, element 2i in the low nibble), got {mx.fmt} {mx.layout} "
                         f"{tuple(mx.shape)}; quantize with mx_quantize(w, 'mxfp4')")


def humming_linear(mx: MXTensor) -> Linear:
    """humming-kernels' MXFP4 layer on our codes: its "mxfp4" weight schema takes OCP packed
    e2m1 (N x K/2 bytes, low nibble first) and E8M0 bytes (N x K/32), as we store them."""
    _ocp_mxfp4(mx, "humming_linear")
    try:
        from humming.layer import HummingLayer
    except Exception as e:  # noqa: BLE001 - any import failure means the peer is absent
        raise PeerMissing(f"humming-kernels cannot be imported ({type(e).__name__}: {e}); "
                          "pip install humming-kernels on a CUDA machine") from None
    if mx.device.type != "cuda":
        raise PeerMissing(f"humming-kernels runs on CUDA only; the weight is on {mx.device}")
    n, k = mx.shape
    layer = HummingLayer(shape_n=n, shape_k=k, weight_config={"quant_method": "mxfp4"},
                         torch_dtype=torch.bfloat16).to(mx.device)
    layer.load_from_tensors({"weight": mx.data.contiguous(), "weight_scale": mx.scales.contiguous()})
    layer.transform()
    return layer


def reference_linear(mx: MXTensor) -> Linear:
    """Dequantize once, then bf16 F.linear: a stand-in peer that runs anywhere (logic checks)."""
    _ocp_mxfp4(mx, "reference_linear")
    w = mx_dequantize(mx, torch.bfloat16)
    return lambda x: torch.nn.functional.linear(x, w)


PEERS: dict[str, tuple[str, Callable[[MXTensor], Linear]]] = {
    "humming": ("humming-kernels", humming_linear),
    "reference": ("dequant+F.linear", reference_linear),
}


def peer_label(name: str) -> str:
    package, _ = PEERS[name]
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return package


def run_peer(name: str, shapes, ms, device: str, seed: int = 0,
             build: Callable[[MXTensor], Linear] | None = None,
             timing: bench.TimingConfig = bench.TimingConfig()) -> dict:
    """Ours (`registry bench`'s rows for w_mxfp4) and the peer's rows beside them, one run.
    A peer that cannot be built here raises PeerMissing before anything is timed."""
    build = build or PEERS[name][1]
    build(mx_quantize(torch.zeros(256, 256, device=device), "mxfp4", layout="packed"))
    ours = bench.run_bench([SCHEME], shapes, ms, device=device, seed=seed, timing=timing,
                           command=" ".join(["tools/bench_peer.py", *sys.argv[1:]]))
    label = peer_label(name) if name in PEERS else name
    contract = load_schemes().get(SCHEME).contract
    ref = load_kernel("reference-emulation")
    peer_rows = []
    with torch.no_grad():
        for n, k in shapes:
            gen, w = bench.task_weight(n, k, seed, device)
            mx = mx_quantize(w, "mxfp4", contract.weight.scale.rounding, layout="packed")
            prepared = ref.prepare(mx, contract)  # the reference reads the peer's very codes
            copies = [build(mx) for _ in range(_copies_needed(mx.nbytes, device))]
            for m in ms:
                base_row = next(r for r in ours.rows if (r.n, r.k, r.m) == (n, k, m))
                row = bench.BenchRow(SCHEME, label, m, n, k, "ok", True, bytes=base_row.bytes)
                x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
                rows = min(bench.CHECK_ROWS, m)
                step = "check"
                try:
                    judge(row, copies[0](x)[:rows], ref.apply(x[:rows], prepared),
                          "reference-emulation", f"the first {rows} rows")
                    if row.status == "ok" and None in (base_row.bf16_eager_us,
                                                       base_row.bf16_loop_us):
                        row.notes.append(f"not timed: our row is {base_row.status}, so this "
                                         "run has no bf16 baseline for it")
                    elif row.status == "ok":
                        step = "timing"
                        bench.time_row(row, copies, lambda layer, x=x: layer(x), device, timing,
                                       _bf16_base(base_row), base_row.bf16_loop_us / 1e3,
                                       ours.environment["copy_tb_s"])
                except Exception as e:  # noqa: BLE001 - reported in the row, never dropped
                    mark_raised(row, step, e)
                peer_rows.append(row)
            del copies
    data = ours.to_dict()
    data["peer"] = {"name": name, "label": label,
                    "rows": [r.to_dict() for r in peer_rows]}
    return data


def _bf16_base(row) -> tuple:
    """The bf16 baseline of one of our rows, back in `_time_both`'s form (ms, no note)."""
    graph = None if row.bf16_graph_us is None else row.bf16_graph_us / 1e3
    return graph, row.bf16_eager_us / 1e3, None


def _f(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown(data: dict) -> str:
    """One line per (shape, M): bf16, ours and the peer (µs and x bf16), ours over the peer."""
    env, peer = data["environment"], data["peer"]
    lines = [f"# {SCHEME}: ours against {peer['label']} on {env['device']}, torch "
             f"{env['torch']}, triton {env['triton']}, driver {env['driver']}, {env['date']}",
             "graph µs (loop µs); x bf16 by graph; ours / peer = peer time / our time (>1: we "
             "are faster)\n",
             "| N x K | M | bf16 | ours | x bf16 | peer | x bf16 | ours / peer (graph) "
             "| ours / peer (loop) | ours | peer |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for o, p in zip(data["rows"], peer["rows"]):
        speed = (p["graph_us"] / o["graph_us"]
                 if o["graph_us"] and p["graph_us"] else None)
        loop = p["loop_us"] / o["loop_us"] if o["loop_us"] and p["loop_us"] else None
        lines.append(
            f"| {o['n']}x{o['k']} | {o['m']} | {_f(o['bf16_graph_us'], '.1f')} "
            f"({_f(o['bf16_loop_us'], '.1f')}) | {_f(o['graph_us'], '.1f')} "
            f"({_f(o['loop_us'], '.1f')}) | {_f(o['ratio'], '.2f')} | "
            f"{_f(p['graph_us'], '.1f')} ({_f(p['loop_us'], '.1f')}) | {_f(p['ratio'], '.2f')} | "
            f"{_f(speed, '.2f')} | {_f(loop, '.2f')} | {_status(o)} | {_status(p)} |")
    return "\n".join(lines)


def _status(row: dict) -> str:
    return row["status"] + ("" if not row["notes"] else ": " + "; ".join(row["notes"])[:120])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", choices=sorted(PEERS), default="humming")
    ap.add_argument("--shapes", default=None, help="NxK[,NxK...] (default 8192x8192)")
    ap.add_argument("--m", default=None, help="comma-separated M values")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        shapes, ms = parse_grid(args.shapes, args.m, device, "1,16,64,128,1024,4096")
    except ValueError as e:
        ap.error(str(e))
    try:
        data = run_peer(args.peer, shapes, ms, device)
    except PeerMissing as e:
        print(f"bench_peer: --peer {args.peer}: {e}", file=sys.stderr)
        return 2
    print(markdown(data))
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    bad = [r for r in data["rows"] + data["peer"]["rows"] if r["status"] != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
