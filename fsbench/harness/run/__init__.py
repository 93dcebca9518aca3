"""One benchmark run: its orchestration, settings, prompts, preflight checks, and the run folder's writing and lock."""
