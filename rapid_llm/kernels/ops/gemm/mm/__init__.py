"""gemm.mm's native kernels, one module per kernel (each its own row): tiled.py (persistent output tiles,
every m), splitk.py (m <= 16: the weight stream split over K, then a reduction)."""
