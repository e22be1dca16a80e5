import sys

from bigbinf.cli import main

sys.exit(main())
