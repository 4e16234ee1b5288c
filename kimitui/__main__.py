import sys

from kimitui.commands.main import main

sys.exit(main())
