"""Pure rules over evidence (stalls, crashes, hangs, replicas, Flight Recorder, launcher and Slurm words, stacks): no I/O."""
