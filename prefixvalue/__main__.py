"""``python -m prefixvalue <study> [--quick] [--device cuda] [--out DIR] ...`` (no tyro needed)."""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from prefixvalue.cli import main  # noqa: E402

sys.exit(main())
