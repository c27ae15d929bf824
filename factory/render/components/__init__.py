"""Kustomize components a user switches on from a kustomization of their own."""
