"""vLLM image factory: recipes in, tested images and compose files out."""

__version__ = "0.1.0"
