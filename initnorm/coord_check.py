"""`python -m initnorm.coord_check`: the command lives in initnorm/cli/coord_check.py.

Importing this module (``python -m`` does, and so does running the command in a process that already imported
initnorm) makes it the package's ``initnorm.coord_check`` attribute, hiding the library function of that name
(``initnorm/__init__.py`` serves it lazily). So the module answers a call as the function does.
"""

import sys

from initnorm.cli.coord_check import CallableCommand, main

sys.modules[__name__].__class__ = CallableCommand

if __name__ == "__main__":
    raise SystemExit(main())
