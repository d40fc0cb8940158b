import os, sys, time
os.environ["OMP_NUM_THREADS"]="1"
import torch as th; th.set_num_threads(1)
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.callbacks import BaseCallback
from sb3_reset_ppo import MaskableResetPPO
import sb3_reset_ppo.envs  # register
from sb3_reset_ppo.envs.masked_cue_recall import normalised_score
from sb3_reset_ppo.common.maskable_evaluation import evaluate_policy
seed=int(sys.argv[1]); total=int(sys.argv[2]); lr=float(sys.argv[3]) if len(sys.argv)>3 else 2e-3
env=make_vec_env("MaskedCueRecall-v0", n_envs=8, seed=seed)
ev=make_vec_env("MaskedCueRecall-v0", n_envs=1, seed=1000+seed)
class CB(BaseCallback):
    def __init__(s): super().__init__(); s.next=2048; s.t0=time.process_time(); s.ev=0.0
    def _on_step(s):
        if s.num_timesteps>=s.next:
            s.next+=2048; a=time.process_time()
            m,_=evaluate_policy(s.model, ev, n_eval_episodes=200, deterministic=True)
            s.ev+=time.process_time()-a
            print(s.num_timesteps, round(normalised_score(m),3), round(time.process_time()-s.t0-s.ev,1), round(s.ev,1), flush=True)
        return True
m=MaskableResetPPO("MlpLstmPolicy", env, learning_rate=lr, gamma=0.9, ent_coef=0.01, policy_kwargs=dict(lstm_hidden_size=32, net_arch=[32]), seed=seed, device="cpu")
m.learn(total, callback=CB())
