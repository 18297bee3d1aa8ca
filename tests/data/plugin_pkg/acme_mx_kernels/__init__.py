"""A fake third-party kernel plugin, installed by tests/support/plugin.py through a temporary
`.dist-info` directory on sys.path (the real `importlib.metadata` entry-point machinery).

`decls` is the entry-point module (torch-free data); `linear` holds the kernel classes, imported
only by `kernels.base.load_kernel`.
"""
