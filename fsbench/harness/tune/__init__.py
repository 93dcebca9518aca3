"""`fsbench tune`: the fastest precision schedule whose videos stay within a fidelity budget (calibrate, cost,
search, validate, record)."""
