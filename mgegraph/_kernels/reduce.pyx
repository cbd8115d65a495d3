# Placeholder: this family's kernels are being written.
KERNELS = {}
