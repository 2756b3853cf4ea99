"""`python -m pseudoformer`: the command line, so that `torchrun -m pseudoformer train …` can start it."""

from pseudoformer.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
