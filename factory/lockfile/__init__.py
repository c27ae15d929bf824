"""The lock's content and where it lives: what `factory lock` chose, read by every later stage."""
