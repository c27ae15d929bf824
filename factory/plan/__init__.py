"""Planning: recipe, strategy and catalog in; image specs, deployments and their node commands out."""
