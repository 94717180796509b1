"""Long-term memory backends, one module each."""
