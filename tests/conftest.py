import torch as th

# Two cores are shared by two pytest workers: one torch thread each.
th.set_num_threads(1)
