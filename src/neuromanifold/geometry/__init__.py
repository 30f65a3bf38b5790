"""Fibers, witnesses, canonical forms and the classification of points of one layer."""
