"""Op families. Each family's __init__ holds its KernelSpec ROWS (data only, torch-free)."""
