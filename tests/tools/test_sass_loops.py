"""tools/sass_loops.py: loops found by their backward branches, each body's opcode mix; forward
branches are not loops."""
from __future__ import annotations

from support.tools import load_tool

sass_loops = load_tool("sass_loops")

NVDISASM = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   LDS R2, [R0] ;
        /*0020*/                   FMUL R3, R2, R2 ;
        /*0030*/                   FFMA R4, R3, R2, R4 ;
        /*0040*/               @P0 BRA `(.L_x_2) ;
        /*0050*/                   FFMA.FTZ R4, R3, R3, R4 ;
.L_x_2:
        /*0060*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;
        /*0070*/               @P1 BRA `(.L_x_1) ;
        /*0080*/                   EXIT ;
"""


def test_a_loop_is_a_backward_branch_and_its_body_is_counted() -> None:
    assert sass_loops.loops(NVDISASM) == [
        (".L_x_1", 7, {"FFMA": 2, "LDS": 1, "FMUL": 1, "BRA": 2, "QGMMA": 1})]
    assert sass_loops.loops(NVDISASM, min_len=8) == []
