"""What the factory tells people: the site's renderings and conformance with them, `factory show`, and the
coverage matrix."""
