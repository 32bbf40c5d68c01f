"""Code that runs inside the Ray job (standard library only: the job's Python is the trainer's)."""
