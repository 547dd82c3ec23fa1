"""Fixtures of the jit_cache tests: the real nvcc (required: a missing one fails, never skips)."""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

import jit_cache


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = os.environ.get("NVCC")
    assert path and os.access(path, os.X_OK), (
        "NVCC must name the real nvcc (cargo xtask setup installs it under target/nvcc-venv); "
        f"got {path!r}"
    )
    return path


@pytest.fixture
def cache(tmp_path: Path, nvcc: str) -> jit_cache.Cache:
    return jit_cache.Cache(tmp_path / "cache", nvcc=nvcc)


KERNEL = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n'


@pytest.fixture
def slow_nvcc(tmp_path: Path, nvcc: str) -> str:
    """An nvcc that sleeps 3 s before each compile of a `.cu` file, then runs the real one."""
    wrapper = tmp_path / "slow-bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in *.cu) sleep 3;; esac; done\n'
        f'exec "{nvcc}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


@pytest.fixture
def s3_env(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """A SeaweedFS S3 server of the test's own on loopback (``jit-cache-s3``'s test server,
    which ``cargo xtask test`` builds and names in ``JIT_CACHE_S3_TEST_SERVER``): yields the
    environment a client needs (``JIT_CACHE_REMOTE=s3://...``, ``AWS_*``); stopped after, by
    its pid."""
    server = os.environ.get("JIT_CACHE_S3_TEST_SERVER")
    assert server and os.access(server, os.X_OK), (
        "JIT_CACHE_S3_TEST_SERVER must name the S3 test server (cargo xtask test builds it: "
        "cargo build -p jit-cache-s3 --features test-server --example s3_test_server)"
    )
    proc = subprocess.Popen(
        [server, str(tmp_path / "s3")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    env = {}
    weed = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line == "ready":
                break
            name, _, value = line.partition("=")
            env[name] = value
        assert "JIT_CACHE_REMOTE" in env, f"the S3 test server did not start (exit {proc.poll()})"
        weed = int(env.pop("WEED_PID"))
        yield env
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)  # it stops the server (by its pid) when its stdin closes
        except subprocess.TimeoutExpired:
            # Stuck: the server's process group goes by its pid (still ours to name: the
            # example that started it is alive), then the example.
            if weed is not None:
                os.killpg(weed, signal.SIGKILL)
            proc.kill()
            proc.wait()


def require_tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} must be installed (cargo xtask setup installs it)"
    return found


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this process for the test, whatever disposition the
    suite was started with: a background job of a non-interactive shell starts with SIGINT
    ignored, and Python then installs no handler of its own."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture
def sigint_default() -> Callable[[], object]:
    """A `preexec_fn` that gives a child process SIGINT's default disposition (its Python then
    installs the KeyboardInterrupt handler), for the same reason as `sigint_raises`."""
    return lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[Tuple[str, Path]]:
    """A redis-server of the test's own on a Unix socket (no persistence), stopped after."""
    server = require_tool("redis-server")
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(
        [server, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.01)
        yield f"redis+unix://{sock}", sock
    finally:
        proc.kill()
        proc.wait()


def redis_cli(sock: Path, *args: str) -> str:
    cli = require_tool("redis-cli")
    return subprocess.run([cli, "-s", str(sock), *args], capture_output=True, text=True, check=True).stdout


class Hosts:
    """Simulated NFS hosts sharing one export (``nfs-sim``: FUSE with NFS client semantics, each
    host in its own mount namespace), driven through its ``nfs-sim-hosts`` binary."""

    def __init__(self, proc: "subprocess.Popen[str]", root: Path, logs: Path) -> None:
        self.proc, self.root, self.logs = proc, root, logs
        self.next_id = 0
        self.ended: Dict[int, Dict[str, Any]] = {}

    def start(self, host: int, argv: List[str], env: Dict[str, str]) -> int:
        self.next_id += 1
        request = {
            "id": self.next_id,
            "host": host,
            "argv": argv,
            "env": {k: v for k, v in env.items() if k not in os.environ or os.environ[k] != v},
            "stdout": str(self.logs / f"{self.next_id}.out"),
            "stderr": str(self.logs / f"{self.next_id}.err"),
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.next_id

    def wait_ready(self, ids: List[int], limit: float = 300) -> None:
        """Until each process printed ``ready`` (a bounded poll of their output files)."""
        deadline = time.monotonic() + limit
        for i in ids:
            out = self.logs / f"{i}.out"
            while not (out.exists() and out.read_text().startswith("ready")):
                assert time.monotonic() < deadline, (self.logs / f"{i}.err").read_text()[-4000:]
                time.sleep(0.01)

    def reports(self, ids: List[int]) -> List[Any]:
        """Waits for each process to end and returns its JSON report (its last line)."""
        assert self.proc.stdout is not None
        while not all(i in self.ended for i in ids):
            line = self.proc.stdout.readline()
            assert line, f"nfs-sim-hosts ended ({self.proc.wait()})"
            ended = json.loads(line)
            self.ended[ended["id"]] = ended
        reports = []
        for i in ids:
            err = (self.logs / f"{i}.err").read_text()
            assert self.ended[i].get("code") == 0, f"process {i}: {self.ended[i]}\n{err[-4000:]}"
            reports.append(json.loads((self.logs / f"{i}.out").read_text().strip().splitlines()[-1]))
        return reports


@pytest.fixture
def nfs_hosts(tmp_path: Path) -> Iterator[Hosts]:
    """Two simulated NFS hosts (``cargo xtask test`` builds ``nfs-sim-hosts`` and names it in
    ``JIT_CACHE_NFS_SIM_HOSTS``; it needs root and /dev/fuse, which these machines have)."""
    helper = os.environ.get("JIT_CACHE_NFS_SIM_HOSTS")
    assert helper and os.access(helper, os.X_OK), (
        "JIT_CACHE_NFS_SIM_HOSTS must name nfs-sim's hosts binary "
        "(cargo build -p nfs-sim --bin nfs-sim-hosts)"
    )
    logs = tmp_path / "host-logs"
    logs.mkdir()
    proc = subprocess.Popen(
        [helper, "--hosts", "2", "--actimeo", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        root = None
        for line in proc.stdout:
            if line.startswith("root "):
                root = Path(line[len("root "):].strip())
            if line.strip() == "ready":
                break
        assert root is not None, f"nfs-sim-hosts did not start ({proc.poll()})"
        yield Hosts(proc, root, logs)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclasses.dataclass
class Team:
    """A group, two users in it, a team root (group-owned, 2770) and a home for each user, under
    a directory every user can enter (pytest's temporary directory is private to root)."""

    group: str
    gid: int
    users: List[str]
    root: Path
    homes: Dict[str, Path]


@pytest.fixture
def team() -> Iterator[Team]:
    """A `Team` made for the test (it runs as root under cargo xtask test), removed afterwards."""
    if os.geteuid() != 0:
        if os.environ.get("FS_TESTBED_REQUIRE") == "1":
            pytest.fail("the team-root test creates two users and needs root")
        pytest.skip("the team-root test creates two users and needs root")
    for tool in ("groupadd", "useradd", "userdel", "groupdel"):
        require_tool(tool)
    tag = f"jctt{os.getpid()}"
    subprocess.run(["groupadd", tag], check=True)
    users: List[str] = []
    base = Path(tempfile.mkdtemp(prefix="jit-cache-team-"))
    try:
        for who in ("a", "b"):
            name = f"{tag}{who}"
            subprocess.run(["useradd", "-M", "-N", "-g", tag, "-s", "/bin/sh", name], check=True)
            users.append(name)
        gid = grp.getgrnam(tag).gr_gid
        base.chmod(0o755)
        root = base / "team"
        root.mkdir()
        os.chown(root, 0, gid)
        root.chmod(0o2770)
        homes = {}
        for user in users:
            homes[user] = base / user
            homes[user].mkdir()
            os.chown(homes[user], pwd.getpwnam(user).pw_uid, gid)
        yield Team(group=tag, gid=gid, users=users, root=root, homes=homes)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for name in users:
            subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", tag], check=False)


def reachable_by_everyone(*paths: Path) -> None:
    """Makes each of ``paths`` reachable by every user in this process's own mount namespace, at
    the same path: a checkout or an interpreter under a directory other users cannot enter (a
    clone under ``/root``, pyenv's ``/root/.pyenv``) is bind-mounted into a tmpfs laid over that
    directory. Only this (forked, still root) process and what it starts see the change; the
    machine's mounts are untouched. Nothing to do when every ancestor of each path can be
    entered already. The blocked directory must be one for all the paths (``/root``)."""
    import ctypes

    tops = set()
    belows = set()
    for path in paths:
        blocked = [a for a in reversed(path.parents) if not a.stat().st_mode & 0o001]
        if blocked:
            tops.add(blocked[0])
            belows.add(blocked[0] / path.relative_to(blocked[0]).parts[0])
    if not tops:
        return
    assert len(tops) == 1, f"one blocked directory above {paths}, not {tops}"
    (top,) = tops
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_bind, ms_rec, ms_private = 0x00020000, 0x1000, 0x4000, 1 << 18

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    check(libc.unshare(clone_newns), "unshare a mount namespace")
    check(libc.mount(b"none", b"/", None, ms_rec | ms_private, None), "make mounts private")
    # Opened in the new namespace: a bind's source must be one of its own mounts (a descriptor
    # opened before `unshare` names the old namespace's, and the bind fails with EINVAL).
    keep = {below: os.open(below, os.O_PATH) for below in sorted(belows)}
    check(libc.mount(b"tmpfs", str(top).encode(), b"tmpfs", 0, b"mode=0755"), f"tmpfs on {top}")
    for below, fd in keep.items():
        below.mkdir()
        source = f"/proc/self/fd/{fd}".encode()
        check(libc.mount(source, str(below).encode(), None, ms_bind | ms_rec, None), f"bind {below}")
        os.close(fd)
