"""
The zoo's command line: ``--help`` names the module command, and ``enjoy`` without a display runs unpaced without
rendering and says so.
"""

import re
import sys
import time
from pathlib import Path

import pytest
from helpers import run_zoo_in_process


@pytest.mark.parametrize("script", ["train", "enjoy"])
def test_zoo_script_help_names_the_module_command(
    script: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process (an interpreter that imports the RL Zoo costs seconds of CPU), with the sys.argv that
    # `python -m sb3_reset_ppo.zoo` gives main: the path of __main__.py first
    import sb3_reset_ppo.zoo

    main_file = Path(sb3_reset_ppo.zoo.__file__).with_name("__main__.py")
    monkeypatch.setattr(sys, "argv", [str(main_file), script, "--help"])
    with pytest.raises(SystemExit) as stopped:
        sb3_reset_ppo.zoo.main()
    out, err = capsys.readouterr()
    assert stopped.value.code == 0, err[-3000:]
    usage = out.splitlines()[0]
    assert re.match(rf"usage: python\S* -m sb3_reset_ppo\.zoo {script} ", usage), usage
    assert "__main__.py" not in out


def test_no_display_reason() -> None:
    from sb3_reset_ppo.zoo import no_display_reason

    assert no_display_reason({}, "linux") is not None and "DISPLAY" in str(no_display_reason({}, "linux"))
    assert no_display_reason({"DISPLAY": ":0"}, "linux") is None
    assert no_display_reason({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert no_display_reason({}, "freebsd14") is not None
    # macOS and Windows have a display without these variables
    assert no_display_reason({}, "darwin") is None and no_display_reason({}, "win32") is None
    # SDL's drivers that show nothing
    for driver in ("dummy", "offscreen"):
        assert "SDL_VIDEODRIVER" in str(no_display_reason({"DISPLAY": ":0", "SDL_VIDEODRIVER": driver}, "linux"))
        assert no_display_reason({"SDL_VIDEODRIVER": driver}, "darwin") is not None
    assert no_display_reason({"DISPLAY": ":0", "SDL_VIDEODRIVER": "x11"}, "linux") is None


def test_enjoy_without_a_display_does_not_render(capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_reset_ppo.zoo import _without_render_if_no_display

    enjoy = ["enjoy", "--algo", "reset_ppo", "--env", "CueRecall-v0"]
    assert _without_render_if_no_display(enjoy, {}, "linux") == [*enjoy, "--no-render"]
    assert "no display" in capsys.readouterr().err
    # Nothing to change: a display, --no-render given, or another script
    for argv, environ in (
        (enjoy, {"DISPLAY": ":0"}),
        ([*enjoy, "--no-render"], {}),
        ([*enjoy, "--no-r"], {}),
        ([*enjoy, "--help"], {}),
        (["train", "--algo", "reset_ppo"], {}),
        ([], {}),
    ):
        assert _without_render_if_no_display(argv, environ, "linux") == argv
    assert capsys.readouterr().err == ""


def test_enjoy_runs_unpaced_and_says_so_without_a_display(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    run = tmp_path / "reset_ppo" / "CueRecall-v0_1"
    run.mkdir(parents=True)
    model = ResetPPO(
        "MlpLstmPolicy", make_vec_env("CueRecall-v0", n_envs=1), n_steps=16, batch_size=16, window_size=8,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )  # fmt: skip
    model.save(run / "CueRecall-v0.zip")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    # 200 steps paced at CueRecall's render_fps (4) would take 50 s
    start = time.monotonic()
    enjoy = ["enjoy", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-f", str(tmp_path), "-n", "200"]
    result = run_zoo_in_process(enjoy, capfd, monkeypatch)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no display" in result.stderr and "--no-render" in result.stderr, result.stderr[-3000:]
    assert "Mean reward" in result.stdout
    assert elapsed < 45, f"enjoy took {elapsed:.0f} s"
