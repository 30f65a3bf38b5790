"""Sweeps over grids of architectures: grids, the SQLite store, local and Dask workers, reports, results as tables."""
