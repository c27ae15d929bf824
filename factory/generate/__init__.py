"""`factory generate`: each image finished once (its blueprint), its files written and remembered."""
