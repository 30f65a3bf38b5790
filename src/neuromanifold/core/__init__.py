"""The network: architectures, parameter layouts and weights, the network map over any arithmetic, the float rank rule, closed forms, checks and seeds."""
