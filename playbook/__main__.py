import sys

from playbook.interfaces.cli import main

sys.exit(main())
