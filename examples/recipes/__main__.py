"""python -m recipes TASK [options] (examples/<task>/run.sh)."""

import sys

from recipes.cli import main

sys.exit(main())
