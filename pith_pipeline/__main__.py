"""`python -m pith_pipeline` runs the command line."""

from pith_pipeline.cli import main

main()
