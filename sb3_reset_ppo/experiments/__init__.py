"""
The experiment code: training runs through the RL Zoo (:mod:`~sb3_reset_ppo.experiments.runner`), on local processes
or a Ray cluster (:mod:`~sb3_reset_ppo.experiments.executors`), their statistics (:mod:`~sb3_reset_ppo.experiments.stats`)
and ``python -m sb3_reset_ppo.compare`` (:mod:`~sb3_reset_ppo.experiments.compare`). Needs the ``compare`` extra, and
``cluster`` for Ray.
"""
