"""Many modules at once: discovery in dump directories, worker processes or dask, the SQLite
results database, progress, and the batch command line."""
