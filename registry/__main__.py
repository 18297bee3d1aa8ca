"""`python -m registry ...` runs the `registry` command."""
import sys

from registry.cli import main

sys.exit(main())
