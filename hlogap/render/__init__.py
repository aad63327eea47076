"""Output formats, one module each, found through the registry in `base` (render, formats)."""
