"""`python -m pseudoformer`: the command line, so that `torchrun -m pseudoformer train …` can start it."""

from pseudoformer.cli import main

raise SystemExit(main())
