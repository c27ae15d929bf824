"""Recipe data in the vLLM recipes repository's schema."""
