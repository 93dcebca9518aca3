"""The Hopper (sm_90) kernels: the launcher, the Triton and Gluon Fused-Softmax kernels, the quantizing prepass
and the tile choice. Importing this package imports no Triton; the launcher loads the kernels on first call."""
