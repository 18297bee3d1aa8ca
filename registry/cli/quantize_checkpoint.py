"""`registry quantize-checkpoint IN_DIR OUT_DIR --scheme S [--format F] [--ignore P] ...`:
quantize a bf16 / fp16 Hugging Face checkpoint shard by shard
(`registry.checkpoints.quantize_checkpoint`). Exit 0 written, 1 refused (one line on stderr
naming the file / tensor / field and the fix), 2 usage. torch is imported only when it runs.
"""
from __future__ import annotations

import argparse
import sys

FORMAT_CHOICES = ("registry", "compressed-tensors", "quark", "auto-round", "gpt-oss")


def quantize_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("in_dir", metavar="IN_DIR",
                   help="the checkpoint: config.json + *.safetensors (sharded or not)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where to write (created; must be empty "
                   "unless --overwrite, or hold an interrupted run of the same job to resume)")
    p.add_argument("--scheme", required=True, metavar="S", help="scheme name or alias")
    p.add_argument("--format", default="registry", choices=FORMAT_CHOICES,
                   help="checkpoint format to write (default: registry)")
    p.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                   help="leave matching layers unquantized (repeatable; exact name, glob, or "
                        "re:REGEX; lm_head and MoE routers are always left)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint files already in OUT_DIR")
    p.add_argument("--device", default=None,
                   help="device to quantize on (default: cuda when available, else cpu)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def quantize_checkpoint_command(args: argparse.Namespace) -> int:
    from registry.checkpoints.quantize_checkpoint import quantize_checkpoint
    from registry.cli.common import catalog_of

    catalog = catalog_of(args) if hasattr(args, "schemes") else None
    try:
        report = quantize_checkpoint(args.in_dir, args.out_dir, args.scheme, format=args.format,
                                     ignore=args.ignore, overwrite=args.overwrite,
                                     device=args.device, progress=not args.no_progress,
                                     catalog=catalog)
    except (ValueError, KeyError, OSError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"registry quantize-checkpoint: error: {message}".replace("\n", " "),
              file=sys.stderr)
        return 1
    print(report)
    return 0


__all__ = ["quantize_checkpoint_arguments", "quantize_checkpoint_command"]
