"""
The export's command line: a file it cannot export is one line naming what is supported (never a
traceback), ``--help`` is complete and plain, and an exporter that cannot write the opset asked for is refused.
"""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from gymnasium import spaces
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, PPO
from test_export import ROOT, tiny_kwargs, vec_env

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.export import export_onnx, read_metadata
from sb3_reset_ppo.export.__main__ import main as export_main

pytest.importorskip("onnx")

SUPPORTED = re.escape(
    "export supports ResetPPO, MaskableResetPPO and sb3-contrib RecurrentPPO models (LSTM or GRU policies; ResetPPO's "
    "and MaskableResetPPO's attention-memory policies too)"
)


def error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The command line's error: exit status 2 and exactly one line on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        export_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("python -m sb3_reset_ppo.export: error: ")
    return err


def saved(algorithm: type, policy: str, path: Path) -> str:
    kwargs = {"n_steps": 16, "batch_size": 16} if algorithm is not A2C else {"n_steps": 16}
    algorithm(policy, vec_env("box", spaces.Discrete(3)), **kwargs).save(path)
    return str(path.with_suffix(".zip"))


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_line([str(tmp_path / "none.zip"), str(tmp_path / "out.onnx")], capsys)
    assert "none.zip: no such file; give the .zip that model.save() wrote" in err


def test_not_a_zip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model.zip").write_text("not a zip")
    err = error_line([str(tmp_path / "model.zip"), str(tmp_path / "out.onnx")], capsys)
    assert "model.zip: not a zip archive" in err


def test_a_zip_that_is_not_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("readme.txt", "hello")
    err = error_line([str(tmp_path / "other.zip"), str(tmp_path / "out.onnx")], capsys)
    assert "other.zip: a zip without SB3's 'data' entry" in err


@pytest.mark.parametrize(
    ("algorithm", "policy", "module", "class_name"),
    [
        (PPO, "MlpPolicy", "stable_baselines3.common.policies", "ActorCriticPolicy"),
        (MaskablePPO, "MlpPolicy", "sb3_contrib.common.maskable.policies", "MaskableActorCriticPolicy"),
        (A2C, "MlpPolicy", "stable_baselines3.common.policies", "ActorCriticPolicy"),
    ],
    ids=["PPO", "MaskablePPO", "A2C"],
)
@pytest.mark.parametrize("algo", ["auto", "recurrent_ppo"])
def test_models_without_memory_are_named(
    algorithm: type,
    policy: str,
    module: str,
    class_name: str,
    algo: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """PPO was loaded as RecurrentPPO (AttributeError 'lstm_actor'), MaskablePPO failed with a TypeError."""
    path = saved(algorithm, policy, tmp_path / "model")
    err = error_line([path, str(tmp_path / "out.onnx"), "--algo", algo], capsys)
    # The policy's class, read from the zip without unpickling it, not only its module
    assert re.search(rf"its policy {re.escape(module)}\.{class_name} has no memory.*{SUPPORTED}", err), err
    assert not (tmp_path / "out.onnx").exists()


def test_the_zip_suffix_is_optional_as_in_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved(ResetPPO, "MlpLstmPolicy", tmp_path / "reset_ppo_cue")
    assert ResetPPO.load(tmp_path / "reset_ppo_cue") is not None  # what SB3's load accepts
    export_main([str(tmp_path / "reset_ppo_cue"), str(tmp_path / "out.onnx")])
    assert (tmp_path / "out.onnx").exists()
    assert "ResetPPO (MlpLstmPolicy) -> " in capsys.readouterr().out


def test_a_recurrent_ppo_checkpoint_is_named_by_its_policy_alias(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # sb3-contrib's MlpLstmPolicy is its RecurrentActorCriticPolicy: printed as the name the user trained it by
    path = saved(RecurrentPPO, "MlpLstmPolicy", tmp_path / "model")
    export_main([path, str(tmp_path / "out.onnx")])
    assert "RecurrentPPO (MlpLstmPolicy) -> " in capsys.readouterr().out


@pytest.mark.parametrize("as_path", [str, Path])
def test_export_onnx_given_a_path_says_to_load_first(as_path: type, tmp_path: Path) -> None:
    path = saved(ResetPPO, "MlpLstmPolicy", tmp_path / "model")
    expected = r"^model must be a loaded model or its policy, got the path '.*model\.zip': load it first"
    with pytest.raises(TypeError, match=expected):
        export_onnx(as_path(path), tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_export_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export_onnx``'s own checks (here channels-last with the ML-Agents layout) come out as one line too."""
    path = saved(ResetPPO, "MlpLstmPolicy", tmp_path / "model")
    err = error_line([path, str(tmp_path / "out.onnx"), "--layout", "mlagents", "--channels-last"], capsys)
    assert "channels_last=True is not supported with layout='mlagents'" in err


def test_help_is_complete_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    """Every option explained, the description whole, no reStructuredText double backticks."""
    with pytest.raises(SystemExit) as exit_info:
        export_main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())  # argparse wraps to the terminal's width
    assert "``" not in text
    supported = (
        "ResetPPO, MaskableResetPPO and sb3-contrib RecurrentPPO models (LSTM or GRU policies; ResetPPO's and "
        "MaskableResetPPO's attention-memory policies too)."
    )
    assert supported in flat
    assert "See docs/guide/deploy.md for the layouts and how to run the file in an engine." in flat
    for option in (
        "--algo",
        "--layout",
        "--opset",
        "--dtype",
        "--exporter",
        "--cell-ops",
        "--distribution",
        "--channels-last",
    ):
        # the option's line, then its help text on the same or the next lines
        block = text[text.index(f"  {option}") :].split("\n  -")[0]
        words = block.replace(option, "").split()
        assert len(words) >= 4, f"{option} has no help: {block!r}"
    assert "float16 follows predict within 1e-2" in flat
    assert "dynamo (torch.export-based" in flat


def test_error_in_a_subprocess(tmp_path: Path) -> None:
    """``python -m sb3_reset_ppo.export`` on a file that is not a zip: one line on stderr, status 2."""
    (tmp_path / "model.zip").write_bytes(b"\x00\x01")
    result = subprocess.run(
        [sys.executable, "-m", "sb3_reset_ppo.export", str(tmp_path / "model.zip"), str(tmp_path / "out.onnx")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not a zip archive" in result.stderr, result.stderr


# torch's own notes while exporting with torch.export
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_dynamo_opset_fallback_is_refused(tmp_path: Path) -> None:
    """torch's dynamo exporter at opset 14 wrote opset 18 (its version converter fails) and the metadata said 14."""
    pytest.importorskip("onnxscript")
    model = ResetPPO(
        "MlpGruPolicy",
        vec_env("box", spaces.Discrete(3)),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Gru", 1, "Mlp"),
    )
    with pytest.raises(ValueError, match=r"exporter='dynamo' wrote opset 18, not the opset=14 asked for"):
        export_onnx(model, tmp_path / "dynamo.onnx", exporter="dynamo", opset=14)
    assert not (tmp_path / "dynamo.onnx").exists()


def unwritable_path(tmp_path: Path) -> Path:
    """A file path in a folder that cannot be written: a read-only folder, or ``/sys`` where permissions do not bind
    (root)."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o500)
    probe = folder / "probe"
    try:
        probe.touch()
    except PermissionError:
        return folder / "out.onnx"
    probe.unlink()
    if _cannot_create(Path("/sys/sb3_reset_ppo_probe.onnx")):
        return Path("/sys/sb3_reset_ppo_out.onnx")
    pytest.skip("no unwritable folder on this machine")


def _cannot_create(path: Path) -> bool:
    try:
        path.open("xb").close()
    except OSError:
        return True
    path.unlink()
    return False


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.mark.parametrize("case", ["parent-is-a-file", "deeper-parent-is-a-file", "a-folder", "unwritable"])
def test_output_paths_that_cannot_be_written(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each was a traceback with exit status 1: now one line naming the path and what is wrong, status 2, an
    ``OSError`` subclass from the Python API, and nothing left behind."""
    model_path = saved(ResetPPO, "MlpLstmPolicy", tmp_path / "model")
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "a_folder").mkdir()
    output, error, words = {
        "parent-is-a-file": (tmp_path / "a_file" / "out.onnx", NotADirectoryError, "a_file is a file, not a folder"),
        "deeper-parent-is-a-file": (tmp_path / "a_file" / "x" / "out.onnx", NotADirectoryError, "a_file is a file"),
        "a-folder": (tmp_path / "a_folder", IsADirectoryError, "a_folder is a folder: give the path of the ONNX file"),
        "unwritable": (None, PermissionError, "Permission denied"),
    }[case]
    if output is None:
        output = unwritable_path(tmp_path)
    before = listing(tmp_path)
    err = error_line([model_path, str(output)], capsys)
    assert str(output) in err and words in err, err
    model = ResetPPO.load(model_path, device="cpu")
    with pytest.raises(error, match=re.escape(words)):
        export_onnx(model, output)
    assert listing(tmp_path) == before


def test_a_vec_normalize_file_that_is_not_a_pickle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An UnpicklingError traceback with exit status 1: now one line, and a ValueError from the Python API."""
    model_path = saved(ResetPPO, "MlpLstmPolicy", tmp_path / "model")
    (tmp_path / "stats.pkl").write_text("not a pickle")
    err = error_line([model_path, str(tmp_path / "out.onnx"), "--vec-normalize", str(tmp_path / "stats.pkl")], capsys)
    assert "stats.pkl' is not a VecNormalize pickle" in err, err
    with pytest.raises(ValueError, match=r"stats\.pkl' is not a VecNormalize pickle \(UnpicklingError"):
        export_onnx(ResetPPO.load(model_path, device="cpu"), tmp_path / "out.onnx", vec_normalize=tmp_path / "stats.pkl")
    assert not (tmp_path / "out.onnx").exists()


def test_a_new_export_replaces_the_file(tmp_path: Path) -> None:
    """A successful export over an existing file replaces it (written beside it, then moved into place)."""
    model = saved(ResetPPO, "MlpLstmPolicy", tmp_path / "model")
    (tmp_path / "out.onnx").write_text("an older file")
    export_main([model, str(tmp_path / "out.onnx"), "--layout", "godot"])
    assert read_metadata(tmp_path / "out.onnx")["layout"] == "godot"
    assert listing(tmp_path) == ["model.zip", "out.onnx"]


# torch's own notes while exporting with torch.export
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_a_refused_export_keeps_the_existing_file_and_says_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A refused re-export deleted the file a previous export wrote (torch overwrote it, the opset check unlinked
    it) and printed 36 lines with torch's traceback; into a new folder it left the folder behind. The command line
    runs in this process (test_error_in_a_subprocess runs its entry point): capfd reads the file descriptors, so
    what torch's native code prints counts too."""
    pytest.importorskip("onnxscript")
    model = saved(ResetPPO, "MlpGruPolicy", tmp_path / "model")
    ok = tmp_path / "ok.onnx"
    export_main([model, str(ok)])
    capfd.readouterr()
    written = ok.read_bytes()
    for output in (ok, tmp_path / "new" / "folder" / "ok.onnx"):
        with pytest.raises(SystemExit) as exit_info:
            export_main([model, str(output), "--exporter", "dynamo", "--opset", "14"])
        assert exit_info.value.code == 2
        stdout, stderr = capfd.readouterr()
        assert stderr.count("\n") == 1 and "exporter='dynamo' wrote opset 18" in stderr, stderr
        assert "Traceback" not in stderr and stdout == ""
    assert ok.read_bytes() == written
    assert listing(tmp_path) == ["model.zip", "ok.onnx"]
