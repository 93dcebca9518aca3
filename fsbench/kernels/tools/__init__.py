"""Tools around the kernels: the speed bench, the check against the emulator, the ablation table, the cuDNN FP8
baseline the bench compares with and the SASS instruction count."""
