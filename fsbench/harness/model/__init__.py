"""The diffusers Wan pipeline and what shapes its weights: real, tiny and a14b-synthetic models, FP8 GEMMs, host
offload and the speed options."""
