"""Dimension engines: the result vocabulary, the one float rank rule, numerical and exact ranks."""
