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



# two wgmma groups a loop turn (A in R28-R31, then R32-R35), each left in flight by a
# DEPBAR.LE 1 (so the second is in flight across the back edge); {TOP} and {MID} write a
# register at the loop's top and between the two groups
HAZARD = """
.L_x_1:
        /*0010*/                   LDS.128 R40, [R0] ;
        /*0020*/                   {TOP} ;
        /*0030*/                   WARPGROUP.ARRIVE ;
        /*0040*/                   HGMMA.64x8x16.F32.BF16 R24, R28, gdesc[UR8], R24, gsb0 ;
        /*0050*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0060*/                   {MID} ;
        /*0070*/                   HGMMA.64x8x16.F32.BF16 R24, R32, gdesc[UR8], R24, gsb0 ;
        /*0080*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0090*/               @P1 BRA `(.L_x_1) ;
        /*00a0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def _sass(top: str = "IADD3 R50, R1, R2, RZ", mid: str = "LOP3.LUT R32, R40, 0x1, RZ, 0xc0, !PT"
          ) -> str:
    return HAZARD.replace("{TOP}", top).replace("{MID}", mid)


def test_a_write_to_an_in_flight_wgmma_operand_is_found_across_the_back_edge() -> None:
    """sass_loops.wgmma_a_hazards: at the top, R50 is free and R30 belongs to the first group,
    retired by the last DEPBAR of the turn before; R33 belongs to the second, in flight across
    the back edge until the first DEPBAR of the next turn. Between the groups, R29 belongs to
    the first group, still in flight (DEPBAR.LE 1 keeps it), and R32 to the second, retired."""
    assert sass_loops.wgmma_a_hazards(_sass()) == []
    assert sass_loops.wgmma_a_hazards(_sass(top="SHF.R.U32.HI R30, RZ, 0x1, R9")) == []
    found = sass_loops.wgmma_a_hazards(_sass(top="MOV R33, R9"))
    assert len(found) == 1 and "writes R33" in found[0]
    found = sass_loops.wgmma_a_hazards(_sass(mid="LDS.64 R28, [R0]"))
    assert len(found) == 1 and "writes R28" in found[0]
    # within a group: its first HGMMA is reading R28 when a write lands before the group's last
    split = _sass().replace(
        "/*0040*/                   HGMMA.64x8x16.F32.BF16 R24, R28, gdesc[UR8], R24, gsb0 ;",
        "/*0040*/                   HGMMA.64x8x16.F32.BF16 R24, R28, gdesc[UR8], R24 ;\n"
        "        /*0044*/                   IMAD.WIDE R30, R1, R2, RZ ;\n"
        "        /*0048*/                   HGMMA.64x8x16.F32.BF16 R24, R36, gdesc[UR8], R24, "
        "gsb0 ;")
    found = sass_loops.wgmma_a_hazards(split)
    assert len(found) == 1 and "writes R30" in found[0]
    # every group retired at once: nothing is in flight when the top writes
    assert sass_loops.wgmma_a_hazards(_sass(top="MOV R33, R9").replace("gsb0, 0x1",
                                                                        "gsb0, 0x0")) == []
