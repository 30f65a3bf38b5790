"""Core mathematics: architectures, weights, the network maps, symmetries, closed forms, seeds."""
