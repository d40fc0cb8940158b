"""
Scale-out on Ray: a real local cluster (a head and a worker node, one CPU each, started with ``ray start`` as the
README shows), the comparison and the grid run through it, the runs' files sent back to the driver.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ray = pytest.importorskip("ray", reason="Ray is not installed (the cluster extra: in the clone, pip install -e '.[cluster]')")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ray_cli() -> list[str]:
    # The ray command of this environment (its scripts folder), as `python -m`-like invocation
    script = Path(sys.executable).with_name("ray")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


CLUSTER_CHECK = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and (len(ray.nodes()) < 2 or ray.cluster_resources().get("CPU", 0) < 2):
    time.sleep(0.5)
print(sum(1 for node in ray.nodes() if node["Alive"]), ray.cluster_resources().get("CPU", 0))
"""


@pytest.fixture
def cluster() -> Iterator[str]:
    """A head and one worker node on this machine (local ports), stopped afterwards; yields the address."""
    # Ray's sockets live in its temp folder: a short path (a Unix socket path has at most 107 characters)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    common = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"]
    head = [*_ray_cli(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    head += ["--include-dashboard", "false", "--temp-dir", temp, *common]
    worker = [*_ray_cli(), "start", "--address", address, "--node-ip-address", "127.0.0.1", *common]
    try:
        for command in (head, worker):
            result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        check = subprocess.run(
            [sys.executable, "-c", CLUSTER_CHECK, address], capture_output=True, text=True, timeout=120, env=env
        )
        assert check.returncode == 0, check.stderr[-3000:]
        assert check.stdout.split()[-2:] == ["2", "2.0"], check.stdout
        yield address
    finally:
        subprocess.run([*_ray_cli(), "stop", "--force"], capture_output=True, timeout=120, env=env)
        time.sleep(1)
        shutil.rmtree(temp, ignore_errors=True)


def test_compare_and_grid_run_on_a_ray_cluster_without_a_shared_filesystem(cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "compare"
    command = [sys.executable, "-m", "sb3_reset_ppo.compare", "--env", "CueRecall-v0", "--seeds", "2", "--timesteps", "2000"]
    command += ["--evaluations", "4", "--eval-episodes", "5", "--out", str(out), "--address", cluster]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"0 of 4 runs already done; 4 to train on the Ray cluster at {cluster}" in result.stdout
    assert "[4/4]" in result.stdout and (out / "REPORT.md").exists()
    for arm in ("reset_ppo", "ppo_lstm"):
        for seed in range(2):
            run_dir = out / "runs" / arm / "CueRecall-v0" / f"seed{seed}"
            run = json.loads((run_dir / "run.json").read_text())
            # Trained in a Ray worker's scratch folder, then sent back whole: the evaluations and the training log
            assert "sb3_reset_ppo_run_" in run["command"] and str(out) not in run["command"]
            assert run["returncode"] == 0 and len(list(run_dir.glob("*/*/evaluations.npz"))) == 1
            assert (run_dir / "progress.csv.gz").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"]["reset_ppo"]["runs"] == 2 and summary["arms"]["ppo_lstm"]["runs"] == 2
    # Resumed through the cluster: nothing trains again
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0 and "4 of 4 runs already done; 0 to train" in again.stdout

    # The study grid, through the same cluster (one test: a second cluster on this machine would be stopped with it)
    grid = [sys.executable, str(ROOT / "benchmarks" / "kit" / "run_grid.py"), "--envs", "CueRecall-v0", "--variants", "reset"]
    grid += ["--seeds", "1", "--eval-episodes", "2", "--steps", "2000", "--out", str(tmp_path / "grid"), "--address", cluster]
    result = subprocess.run(grid, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "reset CueRecall-v0                   seed 0: ok" in result.stdout
    assert (tmp_path / "grid" / "reset" / "CueRecall-v0" / "seed0" / "run.json").exists()
    refused = subprocess.run([*grid, "--minutes", "5"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "with --address Ray schedules the runs" in refused.stderr
