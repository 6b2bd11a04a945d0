import sys

from daemon.console import main

sys.exit(main())
