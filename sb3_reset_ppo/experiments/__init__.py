"""
The experiment code: training runs through the RL Zoo (:mod:`~sb3_reset_ppo.experiments.runner`), on local
processes or a Ray cluster (:mod:`~sb3_reset_ppo.experiments.executors`), their statistics
(:mod:`~sb3_reset_ppo.experiments.stats`, rliable) and the comparison command
(:mod:`~sb3_reset_ppo.experiments.compare`, ``python -m sb3_reset_ppo.compare``). Needs the ``compare`` extra
(``pip install -e ".[compare]"`` in the clone), and the ``cluster`` extra for Ray. The project's own studies
(``benchmarks/``: protocols, study configs, stored results) build on it.
"""
