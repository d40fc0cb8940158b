"""
``python -m sb3_reset_ppo.compare --env ENV_ID [--gym-packages PACKAGE] [--seeds 10] [--address RAY_ADDRESS]``:
ResetPPO against RecurrentPPO on your own task (see :mod:`sb3_reset_ppo.experiments.compare`).
"""

from sb3_reset_ppo.experiments.compare import main

if __name__ == "__main__":
    main()
