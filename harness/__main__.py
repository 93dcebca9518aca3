"""`python -m harness ...` runs the fsbench CLI where the console script is not installed (the H200)."""
from harness.cli import main

main(prog_name="fsbench")
