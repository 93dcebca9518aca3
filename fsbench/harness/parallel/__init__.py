"""Several processes for one run: the team, Ulysses sequence parallelism, CFG parallelism and parallel scoring."""
