"""`python -m fsbench ...` runs the fsbench CLI where the console script is not on PATH."""
from fsbench.harness.cli import main

main(prog_name="fsbench")
