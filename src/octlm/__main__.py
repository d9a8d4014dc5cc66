"""``python -m octlm`` is the ``octlm`` command."""

import sys

from octlm.cli import main

sys.exit(main())
