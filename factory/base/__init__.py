"""What every stage stands on: errors written for people, typed-model bases, YAML and file I/O, and this
machine's tools and build settings."""
