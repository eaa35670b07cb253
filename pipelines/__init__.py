"""Question-answering strategies. Each module registers its builder in `registry`."""
