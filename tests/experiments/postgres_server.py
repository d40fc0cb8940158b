"""
A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` package's ``initdb`` and ``pg_ctl`` in a
temporary folder under ``/tmp``, on a free local port, with a role that logs in with a password and a database
of its own (:func:`running_server`). PostgreSQL refuses to run as root: run as root, every server command runs as
the package's ``postgres`` user (``runuser``, else ``su``); run as anyone else, as that user.

:func:`available_bindir` finds the server's programs or skips the calling test, saying what is missing
(``.ci/run`` installs the package where it is missing and apt works).
"""

import glob
import os
import pwd
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# The programs a server needs, all in the server's bin folder (Debian: /usr/lib/postgresql/<version>/bin)
PROGRAMS = ("initdb", "pg_ctl", "postgres", "psql")
# Debian's server packages, newest version first (see :func:`candidate_bindirs`)
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
# The system user Debian's package creates: the server runs as this user when the tests run as root
SERVER_USER = "postgres"
INSTALL_HINT = "install Debian's postgresql package (apt-get install postgresql; .ci/run does where apt works)"


@dataclass(frozen=True)
class PostgresServer:
    """
    A running server: a database owned by a role that logs in with a password over TCP.

    :param url: SQLAlchemy URL of the database with psycopg 3 (``postgresql+psycopg://user:password@host:port/db``)
    :param password: The role's password (in ``url``)
    :param port: The local TCP port (127.0.0.1)
    :param folder: The server's temporary folder (data, socket, log), removed when the server stops
    """

    url: str
    password: str
    port: int
    folder: Path


def candidate_bindirs() -> list[Path]:
    """
    Folders that may hold the server's programs, in order: ``pg_config --bindir`` (which also exists with the
    client library alone), Debian's ``/usr/lib/postgresql/<version>/bin`` (newest first), then the folder of an
    ``initdb`` on ``PATH`` (links resolved).

    :return: The folders, without repeats
    """
    folders: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        result: subprocess.CompletedProcess[str] | None
        try:
            result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            result = None
        if result is not None and result.returncode == 0 and result.stdout.strip():
            folders.append(Path(result.stdout.strip()))

    def version(folder: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", Path(folder).parent.name))

    folders += [Path(folder) for folder in sorted(glob.glob(DEBIAN_BINDIRS), key=version, reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        folders.append(Path(initdb).resolve().parent)
    return list(dict.fromkeys(folders))


def find_bindir(candidates: Iterable[Path] | None = None) -> Path | None:
    """
    The first folder holding every program of :data:`PROGRAMS` as an executable file.

    :param candidates: Folders to look in (default: :func:`candidate_bindirs`)
    :return: The folder, or None if none has them all
    """
    for folder in candidate_bindirs() if candidates is None else candidates:
        if all(os.access(folder / name, os.X_OK) and (folder / name).is_file() for name in PROGRAMS):
            return folder
    return None


def unavailable_reason(bindir: Path | None) -> str | None:
    """
    Why no server can be started here, if none can: the programs, the ``postgres`` user (needed as root) or a
    way to switch to it is missing, or psycopg (the ``cluster`` extra) is not installed.

    :param bindir: The server's programs (:func:`find_bindir`)
    :return: The reason, for a skip message, or None
    """
    if bindir is None:
        return f"PostgreSQL's server programs ({', '.join(PROGRAMS)}) not found: {INSTALL_HINT}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to run it as: {INSTALL_HINT}"
        if not (shutil.which("runuser") or shutil.which("su")):
            return f"PostgreSQL refuses to run as root and neither runuser nor su is here to run it as {SERVER_USER!r}"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg (the database driver of postgresql+psycopg:// URLs) is not installed: pip install -e '.[cluster]'"
    return None


def available_bindir(candidates: Iterable[Path] | None = None) -> Path:
    """
    The server's programs, or a skip of the calling test saying what is missing (:func:`unavailable_reason`).

    :param candidates: Folders to look in (default: :func:`candidate_bindirs`)
    :return: The folder holding the programs
    """
    bindir = find_bindir(candidates)
    reason = unavailable_reason(bindir)
    if reason is not None:
        pytest.skip(reason)
    assert bindir is not None
    return bindir


def as_server_user(command: Sequence[str]) -> list[str]:
    """``command`` run as the ``postgres`` user where the tests run as root, else as it is."""
    if os.geteuid() != 0:
        return list(command)
    if shutil.which("runuser"):
        return ["runuser", "-u", SERVER_USER, "--", *command]
    return ["su", SERVER_USER, "-s", "/bin/sh", "-c", shlex.join(command)]


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(command: Sequence[str], folder: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """
    Run a server program as the server's user, in ``folder`` (which that user can read), without the caller's
    ``PG*`` settings.

    :return: The finished process
    :raises RuntimeError: With the program's output, if it fails
    """
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    result = subprocess.run(
        as_server_user(command), cwd=folder, env=environment, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@contextmanager
def running_server(
    bindir: Path, database: str = "optuna", user: str = "optuna", attempts: int = 3
) -> Iterator[PostgresServer]:
    """
    Start a PostgreSQL server in a new folder under ``/tmp`` and stop it (``pg_ctl stop -m fast``) and remove the
    folder on exit, whatever happened. Clients on the Unix socket (in the folder) are trusted; TCP clients
    (127.0.0.1 only) log in with a password (SCRAM). Durability is off (``fsync``): the data is thrown away.

    :param bindir: The server's programs (:func:`available_bindir`)
    :param database: The database to create, owned by ``user``
    :param user: The role to create, with a random password
    :param attempts: Ports to try (another process may take a free port before the server binds it)
    :return: The running server (yielded)
    """
    folder = Path(tempfile.mkdtemp(prefix="sb3-reset-ppo-postgres-", dir="/tmp" if os.path.isdir("/tmp") else None))
    data, log = folder / "data", folder / "server.log"
    if os.geteuid() == 0:  # the server's user owns the folder (mkdtemp made it 0700, root's)
        account = pwd.getpwnam(SERVER_USER)
        os.chown(folder, account.pw_uid, account.pw_gid)
    started = False
    try:
        superuser = "postgres"
        _run(
            [str(bindir / "initdb"), "-D", str(data), "-U", superuser, "-E", "UTF8", "--no-locale",
             "--auth-local=trust", "--auth-host=scram-sha-256"],
            folder,
        )  # fmt: skip
        for attempt in range(attempts):
            port = free_port()
            try:
                _start(bindir, folder, port)
                started = True
                break
            except (RuntimeError, subprocess.TimeoutExpired):
                _stop(bindir, data, folder, "immediate")  # in case it started after all
                if attempt == attempts - 1:
                    raise RuntimeError(f"the server did not start; its log:\n{_read(log)}") from None
        password = secrets.token_hex(16)
        psql = [str(bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(folder), "-p", str(port)]
        _run([*psql, "-U", superuser, "-d", "postgres", "-c", f"CREATE ROLE {user} LOGIN PASSWORD '{password}'"], folder)
        _run([*psql, "-U", superuser, "-d", "postgres", "-c", f"CREATE DATABASE {database} OWNER {user}"], folder)
        yield PostgresServer(f"postgresql+psycopg://{user}:{password}@127.0.0.1:{port}/{database}", password, port, folder)
    finally:
        if started and not _stop(bindir, data, folder, "fast"):
            _stop(bindir, data, folder, "immediate")
        shutil.rmtree(folder, ignore_errors=True)


def _start(bindir: Path, folder: Path, port: int) -> None:
    """
    Start the server of ``folder`` (its ``data``, its log ``server.log``) on ``port`` of 127.0.0.1, its Unix socket in
    ``folder``, and wait until it accepts connections.

    :raises RuntimeError: With ``pg_ctl``'s output, if it does not start
    """
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    command = [str(bindir / "pg_ctl"), "-D", str(folder / "data"), "-l", str(folder / "server.log"), "-w", "-t", "60"]
    _run([*command, "-o", options, "start"], folder)


def stop_server(bindir: Path, server: PostgresServer) -> None:
    """
    Stop a running server of :func:`running_server` (``pg_ctl stop -m fast``: its clients' connections are cut).

    :raises RuntimeError: If it did not stop
    """
    if not _stop(bindir, server.folder / "data", server.folder, "fast"):
        raise RuntimeError(f"the server did not stop; its log:\n{_read(server.folder / 'server.log')}")


def start_server(bindir: Path, server: PostgresServer) -> None:
    """Start again a server of :func:`running_server` stopped by :func:`stop_server`, on its port."""
    _start(bindir, server.folder, server.port)


def _stop(bindir: Path, data: Path, folder: Path, mode: str) -> bool:
    """
    Stop the server of ``data`` (``pg_ctl stop -m mode``, waiting up to a minute).

    :return: Whether it stopped (False also if none ran)
    """
    try:
        _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "-t", "60", "stop"], folder, timeout=90)
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
    return True


def _read(path: Path) -> str:
    """A file's text, or a note that it is not there."""
    return path.read_text(errors="replace") if path.exists() else f"({path} not written)"
