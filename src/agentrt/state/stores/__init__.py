"""State store backends, one module each."""
