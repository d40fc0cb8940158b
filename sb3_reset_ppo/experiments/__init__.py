"""Training runs through the RL Zoo, locally or on a Ray cluster, their statistics and ``python -m sb3_reset_ppo.compare``."""
