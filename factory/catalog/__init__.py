"""The factory's own data: what recipes do not say about each hardware target and each vLLM install."""
