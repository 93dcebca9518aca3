"""fsbench evaluation: PSNR / SSIM / LPIPS against the BF16 run, VBench, and comparison reports."""
