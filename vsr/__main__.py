import sys

from vsr.cli import main

sys.exit(main())
