"""``python -m octlm`` is the ``octlm`` command."""

import sys

from octlm.console import main

sys.exit(main())
