"""Trust: keys, signatures and attestations on published digests (cosign), and their verification."""
