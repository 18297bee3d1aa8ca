"""Producer-made checkpoints, built once per test session (tests/support/producer_checkpoints.py);
each fixture skips when its producer's library (the `.[producers]` extra) is not installed."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ct_checkpoints(tmp_path_factory):
    pytest.importorskip("compressed_tensors")
    from support.producer_checkpoints import CT_FORMATS, compressed_tensors_checkpoint

    root = tmp_path_factory.mktemp("ct")
    return {p: compressed_tensors_checkpoint(root / p, p) for p in CT_FORMATS}


@pytest.fixture(scope="session")
def quark_mixed(tmp_path_factory):
    """One Quark export holding mxfp4 (global), mxfp6_e3m2 and mxfp6_e2m3 layers (Quark 0.13's
    exporter refuses per_group fp8: `Unsupported QuantSchema: per_group for quant_dtype:
    fp8_e4m3`, so MXFP8 Quark checkpoints cannot be made here)."""
    pytest.importorskip("quark.torch")
    from support.producer_checkpoints import quark_checkpoint

    return quark_checkpoint(tmp_path_factory.mktemp("quark") / "mixed",
                            {"*down_proj": "OCP_MXFP6E3M2Spec", "*up_proj": "OCP_MXFP6E2M3Spec"})


@pytest.fixture(scope="session")
def auto_round_checkpoints(tmp_path_factory):
    pytest.importorskip("auto_round")
    from support.producer_checkpoints import auto_round_checkpoint

    root = tmp_path_factory.mktemp("ar")
    return {s: auto_round_checkpoint(root / s, s) for s in ("MXFP4", "MXFP8")}
