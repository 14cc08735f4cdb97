"""The I/O edge: processes, tails, py-spy, sockets, srun, the run record on disk."""
