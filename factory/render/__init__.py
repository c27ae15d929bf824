"""Rendering: plans in; Dockerfiles, compose files, the bake file and each image's inputs hash out."""
