"""Native vendor-library paths (torch._scaled_mm MX block-scaled GEMM)."""
