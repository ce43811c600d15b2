"""``python -m spark.cli``: the ``tidelake`` command."""

import sys

from spark.cli.main import main

sys.exit(main())
