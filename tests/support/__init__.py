"""Helpers shared by the tests (imported as `support.NAME`; tests/conftest.py puts tests/ on
sys.path). Test modules never import each other: what two of them share lives here."""
