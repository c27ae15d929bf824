"""The upstream recipes site's command synthesis, in Python: which deployments a recipe offers on which
hardware, and each one's `vllm serve` commands, flag for flag. Pure functions over the recipe tree."""
