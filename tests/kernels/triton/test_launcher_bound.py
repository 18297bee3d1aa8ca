"""`launcher.Bound` with tensor descriptors: on Triton 3.6's launcher (the H200's) the fixed
descriptors are encoded once and a per-call one once per address, and the C launch gets exactly
the arguments Triton's own wrapper would give it; on any other launcher the Bound hands the
descriptors to Triton as they are. CPU: Triton 3.6's wrapper is modelled here (its shape is
what `split_launcher` checks); the GPU tests run the real one (test_linear_wgmma_ws)."""
from __future__ import annotations

import pytest
import torch

from kernels.triton import launcher
from kernels.triton.wgmma_tiles import XDesc

nvidia = pytest.importorskip("triton.backends.nvidia.driver")

BASE = 13  # triton 3.6: grid (3), stream, function, coop, pdl, 2 scratch, metadata, 3 hooks


def wrap_like_triton_36(launcher, tensordesc_indices, tensordesc_meta):  # noqa: ANN001
    """Triton 3.6's `wrap_handle_tensordesc`, in behaviour and closure: each descriptor
    argument expanded by the driver's `make_tensordesc_arg` on every call."""
    def inner(*args):
        final = list(args[:BASE])
        n = 0
        for i, arg in enumerate(args[BASE:]):
            if i in tensordesc_indices:
                final.extend(nvidia.make_tensordesc_arg(arg, tensordesc_meta[n]))
                n += 1
            else:
                final.append(arg)
        return launcher(*final)
    return inner


class Run:
    """Triton 3.6's CudaLauncher as a Bound calls it (no scratch buffers)."""
    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, launch) -> None:  # noqa: ANN001
        self.launch = launch

    def __call__(self, gx, gy, gz, stream, function, *args):  # noqa: ANN001
        self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, None, None, *args)


class Compiled:
    function, packed_metadata = 11, ("meta",)

    def __init__(self, run) -> None:  # noqa: ANN001
        self.run = run


@pytest.fixture
def triton_36(monkeypatch):
    """The driver module as Triton 3.6 has it, with an encoder that records its calls."""
    encoded: list = []

    def encode(arg, meta):  # noqa: ANN001
        encoded.append((arg.base.data_ptr(), tuple(arg.shape), meta))
        return [("map", arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), meta),
                *arg.shape, *arg.strides]

    monkeypatch.setattr(nvidia, "make_tensordesc_arg", encode)
    monkeypatch.setattr(nvidia, "_BASE_ARGS_FORMAT_LEN", BASE, raising=False)
    return encoded


def launch_pair(descs: dict):
    """A compiled kernel whose C launch records its arguments, with the 3.6 wrapper."""
    calls: list = []
    inner = wrap_like_triton_36(lambda *a: calls.append(a), set(descs), list(descs.values()))
    return Compiled(Run(inner)), calls


def test_fixed_descriptors_are_encoded_once_and_the_c_launch_gets_triton_s_arguments(
        triton_36) -> None:
    w, s, out = torch.zeros(64, 256), torch.zeros(8, 256), torch.zeros(4, 4)
    x1, x2 = torch.zeros(16, 64), torch.zeros(16, 64)
    wd, sd = XDesc(w), XDesc(s)
    args = [XDesc(x1), wd, 7, sd, out, 16, True]  # x (per call), two fixed descriptors, ...
    descs = {0: "x-meta", 1: "w-meta", 3: "s-meta"}
    compiled, calls = launch_pair(descs)
    bound = launcher.Bound(compiled, (4, 2), args, (0, 4, 5))
    assert bound.encoded and len(triton_36) == 2  # w and s, at construction
    for x, o, m in ((x1, out, 16), (x2, out, 9), (x1, out, 5)):
        bound(99, (XDesc(x), o.data_ptr(), m))
        got = calls.pop()
        # what Triton's own path gives the C launch for the same arguments
        Run(compiled.run.launch)(4, 2, 1, 99, 11, ("meta",), None, None, None,
                                 XDesc(x), wd, 7, sd, o.data_ptr(), m, True)
        assert got == calls.pop()
    # x1 encoded once (its second call reuses it), x2 once; plus 3 by the reference calls
    assert [e[0] for e in triton_36[2:]].count(x1.data_ptr()) == 3
    assert [e[0] for e in triton_36[2:]].count(x2.data_ptr()) == 2


def test_a_per_call_descriptor_of_another_shape_is_encoded_again(triton_36) -> None:
    x = torch.zeros(64, 64)
    compiled, calls = launch_pair({0: "x-meta"})
    bound = launcher.Bound(compiled, (1,), [XDesc(x), 3], (0, 1))
    bound(1, (XDesc(x[:16]), 16))
    bound(1, (XDesc(x[:32]), 32))
    bound(1, (XDesc(x[:16]), 16))
    assert [e[1] for e in triton_36] == [(16, 64), (32, 64)]
    assert [c[13][2] for c in calls] == [(16, 64), (32, 64), (16, 64)]


def test_other_launchers_take_the_descriptors_as_they_are(triton_36, monkeypatch) -> None:
    """No descriptors (Triton returns its C launch unwrapped), scratch buffers, a wrapper of
    another shape, or another Triton's driver: `split_launcher` declines and the Bound calls
    Triton's launcher with the descriptor objects."""
    seen: list = []
    plain = Compiled(lambda *a: seen.append(a))
    assert launcher.split_launcher(plain) is None
    x = torch.zeros(16, 64)
    xd = XDesc(x)
    bound = launcher.Bound(plain, (2,), [xd, x, 5], (0, 2))
    bound(7, (xd, 6))
    assert not bound.encoded and seen == [(2, 1, 1, 7, 11, ("meta",), None, None, None, xd,
                                           x.data_ptr(), 6)]

    compiled, _ = launch_pair({0: "x-meta"})
    assert launcher.split_launcher(compiled) is not None
    monkeypatch.setattr(compiled.run, "global_scratch_size", 64, raising=False)
    assert launcher.split_launcher(compiled) is None

    other = Compiled(Run(lambda *a, extra=1: a))  # a wrapper that closes over nothing
    assert launcher.split_launcher(other) is None

    monkeypatch.setattr(nvidia, "_BASE_ARGS_FORMAT_LEN", 14)  # another launch format
    assert launcher.split_launcher(launch_pair({0: "x-meta"})[0]) is None


def test_this_triton_s_own_wrapper_is_declined_unless_it_is_3_6() -> None:
    """The installed Triton's real descriptor wrapper: opened up only where it is 3.6's."""
    import triton

    wrap = getattr(nvidia, "wrap_handle_tensordesc")
    inner = wrap(lambda *a: a, {"x": "tensordesc<bf16[16, 64]>", "m": "i32"},
                 [{"swizzle": 3}])
    split = launcher.split_launcher(Compiled(Run(inner)))
    assert (split is not None) == triton.__version__.startswith("3.6")


def test_compiled_of_finds_what_launch_compiled(monkeypatch) -> None:
    """`compiled_of` looks a specialization up under `launch`'s own memo (tools/host_profile.py
    times its launcher apart: it broke once when `launch`'s memo gained `pdl`); other options
    find nothing."""
    class Active:
        def get_current_device(self) -> int:
            return 3

    class Driver:
        active = Active()

    class Kernel:  # a compiled kernel's stand-in: fn[grid](...) compiles and returns it
        def __getitem__(self, grid):  # noqa: ANN001
            return lambda *args, **opts: ("compiled", grid, opts)

    monkeypatch.setattr(launcher, "driver", Driver())
    monkeypatch.setattr(launcher, "hooked", lambda: False)
    fn = Kernel()
    got = launcher.launch(fn, ("key",), (2,), (1,), num_warps=4, num_stages=3, maxnreg=64,
                          pdl=True)
    assert got == ("compiled", (2,), {"num_warps": 4, "num_stages": 3, "maxnreg": 64,
                                      "launch_pdl": True})
    found = launcher.compiled_of(fn, ("key",), num_warps=4, num_stages=3, maxnreg=64, pdl=True)
    assert found is got
    assert launcher.compiled_of(fn, ("key",), num_warps=4, num_stages=3, maxnreg=64) is None
    assert launcher.compiled_of(fn, ("key",), num_warps=8, num_stages=3, maxnreg=64,
                                pdl=True) is None
