"""Provider adapters, one module each, imported lazily by the registry."""
