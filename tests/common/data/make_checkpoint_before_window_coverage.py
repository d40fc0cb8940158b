"""
Write ``checkpoint_before_window_coverage.zip``, a ResetPPO checkpoint as saved before ``window_coverage`` existed,
for tests/common/test_checkpoints.py: a tiny model trained with the settings of that time (windows of 4 inside the
rollout), saved, then the attributes that came later (``window_coverage``, ``_window_generator_state``) removed from
the checkpoint's ``data`` member (SB3's JSON of the model's attributes).

Run from the repository root: ``python tests/common/data/make_checkpoint_before_window_coverage.py``
"""

import json
import zipfile
from pathlib import Path

from sb3_reset_ppo import ResetPPO

PATH = Path(__file__).with_name("checkpoint_before_window_coverage.zip")
# Attributes that a checkpoint saved before window_coverage existed does not hold
LATER_ATTRIBUTES = ("window_coverage", "_window_generator_state")


def main() -> None:
    model = ResetPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        n_steps=8,
        batch_size=8,
        n_epochs=1,
        window_size=4,
        window_coverage="inside",
        seed=0,
        policy_kwargs={"lstm_hidden_size": 4, "net_arch": [4]},
    )
    model.learn(16)
    model.save(PATH)
    with zipfile.ZipFile(PATH) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    data = json.loads(members["data"])
    for name in LATER_ATTRIBUTES:
        del data[name]
    members["data"] = json.dumps(data, indent=4).encode("utf-8")
    with zipfile.ZipFile(PATH, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
