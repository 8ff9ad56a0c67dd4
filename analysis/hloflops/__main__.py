"""`python -m hloflops ...` is the `hloflops` command."""

from hloflops.cli import main

raise SystemExit(main())
