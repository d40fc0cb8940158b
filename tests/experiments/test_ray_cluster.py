"""
Scale-out on Ray: a real local cluster (a head and a worker node, one CPU each, started with ``ray start`` as the
README shows), the comparison and the grid run through it, the runs' files sent back to the driver; and a grid whose
worker node is killed (its raylet, SIGKILL) while a run trains there. Each test stops its own cluster's processes
only.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_helpers import run_with_fault

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


@dataclass(frozen=True)
class Cluster:
    """
    A local Ray cluster of the test's own.

    :param address: The head's address (``host:port``)
    :param temp: Ray's temporary folder (its sessions, sockets and logs)
    :param worker_port: The worker node's raylet port (its command line names it: how the test finds it)
    """

    address: str
    temp: str
    worker_port: int


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every running process this user may read: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            line = (entry / "cmdline").read_bytes()
        except OSError:  # ended meanwhile, or not readable
            continue
        # The state and the parent pid follow the command's name, which is in parentheses and may hold spaces
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":  # ended, not yet reaped
            found[int(entry.name)] = (int(parent), line)
    return found


def _descendants(pid: int, processes: dict[int, tuple[int, bytes]]) -> list[int]:
    children = [child for child, (parent, _) in processes.items() if parent == pid]
    return children + [grandchild for child in children for grandchild in _descendants(child, processes)]


def _stop(temp: str, port: int) -> None:
    """
    Kill this cluster's processes only (those whose command line names its temporary folder or its head's port,
    and their children: Ray's workers name neither), where ``ray stop`` would stop every Ray process of the machine.
    """
    for _ in range(5):
        processes = _processes()
        own = [
            pid
            for pid, (_, line) in processes.items()
            if temp.encode() in line or (b"ray" in line and f":{port}".encode() in line)
        ]
        doomed = set(own) | {child for pid in own for child in _descendants(pid, processes)}
        doomed.discard(os.getpid())
        if not doomed:
            return
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(1)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A head and one worker node on this machine (local ports), stopped afterwards."""
    # Ray's sockets live in its temp folder: a short path (a Unix socket path has at most 107 characters)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    port, worker_port = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    # No worker started before a task asks for one (Ray prestarts one per CPU for each driver that connects: the
    # check below, the resumed comparison), no log monitor (a run's output comes back in its files)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    env.update(RAY_enable_worker_prestart="0", RAY_prestart_worker_first_driver="0")
    common = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"]
    common += ["--include-log-monitor", "false"]
    head = [*_ray_cli(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    head += ["--include-dashboard", "false", "--temp-dir", temp, *common]
    worker = [*_ray_cli(), "start", "--address", address, "--node-ip-address", "127.0.0.1", *common]
    worker += ["--node-manager-port", str(worker_port)]
    try:
        for command in (head, worker):
            result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        check = subprocess.run(
            [sys.executable, "-c", CLUSTER_CHECK, address], capture_output=True, text=True, timeout=120, env=env
        )
        assert check.returncode == 0, check.stderr[-3000:]
        assert check.stdout.split()[-2:] == ["2", "2.0"], check.stdout
        yield Cluster(address, temp, worker_port)
    finally:
        _stop(temp, port)
        shutil.rmtree(temp, ignore_errors=True)


def test_compare_and_grid_run_on_a_ray_cluster_without_a_shared_filesystem(cluster: Cluster, tmp_path: Path) -> None:
    address = cluster.address
    out = tmp_path / "compare"
    command = [sys.executable, "-m", "sb3_reset_ppo.compare", "--env", "CueRecall-v0", "--seeds", "2", "--timesteps", "2000"]
    command += ["--evaluations", "4", "--eval-episodes", "5", "--out", str(out), "--address", address]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"0 of 4 runs already done; 4 to train on the Ray cluster at {address}" in result.stdout
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
    grid += ["--seeds", "1", "--eval-episodes", "2", "--steps", "2000", "--out", str(tmp_path / "grid"), "--address", address]
    result = subprocess.run(grid, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "reset CueRecall-v0                   seed 0: ok" in result.stdout
    assert (tmp_path / "grid" / "reset" / "CueRecall-v0" / "seed0" / "run.json").exists()
    refused = subprocess.run([*grid, "--minutes", "5"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "with --address Ray schedules the runs" in refused.stderr


def _zoo_trainers(processes: dict[int, tuple[int, bytes]], pids: list[int]) -> list[int]:
    """Of ``pids``, the zoo's training processes (``python -m sb3_reset_ppo.zoo train``)."""
    return [pid for pid in pids if b"sb3_reset_ppo.zoo\0train" in processes.get(pid, (0, b""))[1]]


@pytest.mark.slow
def test_a_grid_survives_a_killed_worker_node_and_stores_each_run_once(cluster: Cluster, tmp_path: Path) -> None:
    # Slow (about three and a half minutes on 2 busy cores): the cluster takes most of a minute to start, and the
    # grid's three runs, each a zoo process that imports torch, and its rerun of the lost one about three more
    out = tmp_path / "grid"
    grid = [sys.executable, str(ROOT / "benchmarks" / "kit" / "run_grid.py"), "--envs", "CueRecall-v0", "--variants", "reset"]
    grid += ["--seeds", "3", "--eval-episodes", "2", "--steps", "4000", "--out", str(out), "--address", cluster.address]
    killed: dict[str, int] = {}

    def kill_the_worker_node() -> bool:
        # The worker node's raylet, killed (SIGKILL) once a run trains on that node: a Ray worker of that raylet
        # runs the zoo's trainer
        processes = _processes()
        raylets = [
            pid
            for pid, (_, line) in processes.items()
            if b"raylet" in line and f"--node_manager_port={cluster.worker_port}".encode() in line
        ]
        assert len(raylets) == 1, raylets
        for worker in (child for child, (parent, _) in processes.items() if parent == raylets[0]):
            trainers = _zoo_trainers(processes, _descendants(worker, processes))
            if trainers:
                os.kill(raylets[0], signal.SIGKILL)
                killed.update(raylet=raylets[0], worker=worker, trainer=trainers[0])
                return True
        return False

    code, output = run_with_fault(grid, kill_the_worker_node)
    assert killed, output[-3000:]
    # The node's trainer died with it (it trains on as an orphan nowhere)
    time.sleep(2)
    assert killed["trainer"] not in _processes(), killed
    # The grid completed in the same invocation: the lost run was sent again, to the head
    assert code == 0, output[-5000:]
    assert output.count("lost with its machine or worker, sent again (attempt 2 of 3)") == 1, output[-5000:]
    assert "NodeDiedError" in output or "WorkerCrashedError" in output, output[-5000:]
    # Every run reported and stored once: one ok line, one record and one set of evaluations each, nothing else
    for seed in range(3):
        assert len(re.findall(rf"reset CueRecall-v0 +seed {seed}: ok", output)) == 1, output[-5000:]
        run_dir = out / "reset" / "CueRecall-v0" / f"seed{seed}"
        assert json.loads((run_dir / "run.json").read_text())["returncode"] == 0
        assert len(list(run_dir.glob("*/*/evaluations.npz"))) == 1
    assert sorted(path.name for path in (out / "reset" / "CueRecall-v0").iterdir()) == ["seed0", "seed1", "seed2"]
    # The killed worker's scratch folder was removed by a later run on this machine
    host_scratch = list(Path(tempfile.gettempdir()).glob(f"sb3_reset_ppo_run_{killed['worker']}_*"))
    assert host_scratch == [], host_scratch
    # Resumed: nothing trains again
    again = subprocess.run(grid, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "3 of 3 runs already done; 0 to run" in again.stdout, again.stdout[-3000:]
