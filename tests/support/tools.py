"""The repository's tools/*.py, imported by the tests that check them."""
import importlib.util
import sys

from support.paths import TOOLS


def load_tool(name: str):
    """tools/NAME.py imported as a module, once per process (tests share a tool's helpers)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
