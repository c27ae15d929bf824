"""The Docker Engine: connecting to it, labelling and cleaning up what the factory starts, and progress while
it works."""
