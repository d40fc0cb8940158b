import os

import torch as th
from hypothesis import settings

# Two cores are shared by two pytest workers: one torch thread each.
th.set_num_threads(1)

# Hypothesis profiles: "ci" (the default) runs a quarter of each property test's examples (``helpers.examples``),
# "thorough" runs them all (``make test-slow`` selects it with HYPOTHESIS_PROFILE=thorough)
settings.register_profile("ci", max_examples=25)
settings.register_profile("thorough", max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
