"""recalld's benchmarks: scripts, not tests.

Each script runs from the checkout's root as `python -m bench.<name>` (with the virtualenv's
Python, `.venv/bin/python -m bench.<name>`); its docstring says what it measures and how. What
several scripts share lives in `bench.lib`. The current figures are in docs/BENCHMARKS.md, how
they were reached in bench/NOTES.md, and the reports as printed in bench/results/.
"""
