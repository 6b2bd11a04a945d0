"""Helpers the tests import (fixtures stay in the conftest.py files, which nothing imports)."""
