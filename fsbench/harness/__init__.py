"""fsbench harness: CLI, pipelines, attention routing, schedules, LoadGen driver and results layout."""
