"""Validating built images: static checks inside the image, then a real server probed over HTTP."""
