"""Publishing validated images to a registry, and checking what the registry then holds."""
