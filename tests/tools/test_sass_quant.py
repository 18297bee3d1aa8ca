"""tools/sass_quant.py: the SASS instruction count (from both SASS text forms), the argument
checks, and one offline sm_90a compile of a real variant in a subprocess (skipped only where
the installed triton has no NVIDIA backend / ptxas: CI's CPU triton has both)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.tools import load_tool

sass_quant = load_tool("sass_quant")
ROOT = Path(__file__).resolve().parents[2]

CUOBJDUMP = """
        Function : _quantize_kernel
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R2, SR_TID.X ;
        /*0020*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   FMNMX R6, R7, |R6|, PT ;
        /*0040*/               @P1 EXIT ;
        /*0050*/                   STG.E.128 desc[UR4][R2.64], R4 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70;
        /*0080*/                   NOP;
        /*0090*/                   NOP;
"""
TRITON = """Function:_dequantize_kernel
--:-:0:-:1\tLDC R1, c[0x0][0x28];
--:-:1:-:1\tS2R R2, SR_TID.X;
02:-:-:Y:2\tIMAD.SHL.U32 R12, R2, 0x8, RZ;
--:-:-:-:5\tEXIT;
--:-:-:Y:0\tBRA 0x40;
--:-:-:Y:0\tNOP;
"""


def test_counts_up_to_the_last_exit() -> None:
    assert sass_quant.count_instructions(CUOBJDUMP) == 7
    assert sass_quant.count_instructions(TRITON) == 4
    assert sass_quant.opcode_histogram(CUOBJDUMP) == {"EXIT": 2, "LDC": 1, "S2R": 1, "LDG": 1,
                                                      "FMNMX": 1, "STG": 1}
    assert sass_quant.opcode_histogram(TRITON)["IMAD"] == 1


def test_arguments() -> None:
    args = sass_quant.parse_args(["--kernel", "dequantize", "--formats", "mxfp4,mxint8",
                                  "--layouts", "packed,unpacked", "--dtype", "fp16"])
    assert args.formats == ["mxfp4", "mxint8"] and args.dtype == "fp16"
    assert sass_quant.variants("dequantize", args.formats, args.layouts) == [
        ("mxfp4", "packed"), ("mxfp4", "unpacked"), ("mxint8", "unpacked")]
    for bad in (["--formats", "mxfp5"], ["--layouts", "dense"], ["--dtype", "fp8"]):
        with pytest.raises(SystemExit):
            sass_quant.parse_args(bad)


def test_compiles_one_variant_offline() -> None:
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
        from triton import knobs
        ptxas = knobs.nvidia.ptxas.path
    except Exception as err:  # noqa: BLE001 - any missing piece of the NVIDIA backend
        pytest.skip(f"no triton NVIDIA backend / ptxas here: {err}")
    if not ptxas or not os.path.exists(ptxas):
        pytest.skip("no ptxas in this triton install")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "sass_quant.py"), "--formats",
                          "mxfp4,mxfp6_e2m3,mxfp8_e5m2", "--layouts", "packed,unpacked", "--cvt"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    per_element = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 7 and cells[0] in ("mxfp4", "mxfp6_e2m3", "mxfp8_e5m2"):
            per_element[(cells[0], cells[1], cells[2])] = float(cells[5])
            assert 16 <= int(cells[6]) <= 255, line  # registers a thread, from cuobjdump
    assert 5 < per_element[("mxfp4", "packed", "encode")] < 30, out.stdout  # ~21 (triton 3.6)
    # the PTX of the fp8 conversion (mxfp6 / mxfp8) and of mxfp4's bf16x2 lanes compiles
    # (ptxas) and cuts the element work of every layout it serves
    for fmt, layout in (("mxfp4", "packed"), ("mxfp4", "unpacked"), ("mxfp6_e2m3", "packed"),
                        ("mxfp6_e2m3", "unpacked"), ("mxfp8_e5m2", "unpacked")):
        cvt, enc = per_element[(fmt, layout, "hw cvt")], per_element[(fmt, layout, "encode")]
        assert cvt < 0.9 * enc, (fmt, layout, cvt, enc)


@pytest.mark.parametrize("kernel", ["quantize", "dequantize"])
def test_compiles_on_the_pointer_types_the_launches_pass(kernel: str, monkeypatch) -> None:
    """The codes' pointer type of each layout is the dtype mx_quant's launch passes (packed
    mxfp4 dequantize was compiled on int32 words here while its launches pass bytes)."""
    import torch

    from kernels.reference import mx as ref
    from kernels.spec.formats import FORMATS
    from kernels.triton import mx_quant
    from support.device import DEVICE

    seen = {}
    monkeypatch.setattr(mx_quant, "_launch", lambda fn, ptrs, *a: seen.update(
        dtype=ptrs[1 if kernel == "quantize" else 0].dtype))
    want = {"*u8": torch.uint8, "*i32": torch.int32}
    x = torch.randn(2, 64, device=DEVICE)
    for name, layout in sass_quant.variants(kernel, ["mxfp4", "mxfp6_e3m2", "mxint8"],
                                            ["packed", "unpacked"]):
        fmt = FORMATS[name]
        if kernel == "quantize":
            mx_quant.quantize(x, fmt, "even", layout)
        else:
            data, scales = ref.quantize(x.cpu(), fmt, "even", layout)
            mx_quant.dequantize(data.to(DEVICE), scales.to(DEVICE), fmt, layout, 64,
                                torch.bfloat16)
        pack = mx_quant.pack_code(fmt, layout)
        assert seen.pop("dtype") == want[sass_quant.data_pointer(pack)], (name, layout)
