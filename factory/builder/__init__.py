"""Building images through BuildKit: staging, backends (Compose v2, buildx bake), tagging, reports."""
