"""The example project's own package (shipped in the code layer)."""
