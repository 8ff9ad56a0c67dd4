"""What one instruction costs: the per-opcode rules, custom-call targets, fusion boundary bytes,
convolution and reduce-window taps, and the shape sizes they read."""
