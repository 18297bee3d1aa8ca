"""Where things are: the repository, the tests' data, the tools (every test computes its paths
from here, never from its own depth in tests/)."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DATA = TESTS / "data"
#: scheme files each broken in one way (tests/data/broken_schemes/NAME.yaml)
BROKEN_SCHEMES = DATA / "broken_schemes"
#: HF config.json fixtures (Quark, compressed-tensors), each citing its source in `_comment`
HF_CONFIGS = DATA / "hf_configs"
#: a fake third-party kernel plugin (the `acme_mx_kernels` package), put on sys.path by tests
PLUGIN_PKG = DATA / "plugin_pkg"
TOOLS = REPO / "tools"
SCHEMES = REPO / "schemes"
