"""`python -m recalld`: the same entry point as the `recalld` executable."""

import sys

try:
    from recalld.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python was still importing the entry point itself
    print("\nrecalld: interrupted", file=sys.stderr)
    sys.exit(130)  # recalld.cli.EXIT_INTERRUPTED, which did not finish loading

sys.exit(main())
