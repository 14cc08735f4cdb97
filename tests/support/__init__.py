"""What the tests share: waiting for a condition, the dashboard under a pilot, a real terminal, real Slurm clusters,
the engine run in-process, and the scenes and inputs more than one test module builds on."""
