"""Reading and writing files: weight files and output files staged into place together."""
