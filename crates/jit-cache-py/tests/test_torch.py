"""jit_cache.torch with the real torch on the CPU (Inductor's C++ backend, g++): a new process
with an empty Inductor cache gets its FX graph from the store, through the ``JIT_CACHE_TORCH=1``
hook and through ``install()``; a corrupt entry is a miss, then replaced; another torch version
never meets the entries; two processes compile a graph once; the Redis and S3 fleet tiers and
two simulated NFS hosts serve each other; a team root serves two users; kill -9 in the put
leaves nothing torn."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import jit_cache
from conftest import Hosts, Team, reachable_by_everyone

if os.environ.get("XTASK_TEST") == "1":
    import torch  # cargo xtask test runs this file with torch: missing, the suite fails
else:
    torch = pytest.importorskip("torch")

WORKER = str(Path(__file__).with_name("torch_worker.py"))
EXPECTED = [float(v) for v in (torch.sin(torch.arange(8.0)) * torch.arange(8.0) + 1).tolist()]
_runs = itertools.count()


def worker_env(root: Path, inductor_dir: Path, **extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env["JIT_CACHE_DIR"] = str(root)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    env["JIT_CACHE_TORCH"] = "1"
    for name in ("JIT_CACHE_REMOTE", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE"):
        env.pop(name, None)
    env.update(extra)
    return env


def fresh_inductor_dir(tmp: Path) -> Path:
    """An Inductor cache of its own for one process: what a new host or container starts with."""
    return tmp / f"inductor-{next(_runs)}"


def run_worker(
    root: Path, tmp: Path, *args: str, check: bool = True, extra: Optional[Dict[str, str]] = None
) -> Any:
    out = subprocess.run(
        [sys.executable, WORKER, *args],
        env=worker_env(root, fresh_inductor_dir(tmp), **(extra or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not check:
        return out
    assert out.returncode == 0, f"worker {args} failed ({out.returncode}):\n{out.stderr[-4000:]}"
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["stderr"] = out.stderr
    return report


def cli(root: Path, *args: str, team: bool = False) -> Any:
    out = subprocess.run(
        [jit_cache.launcher_path(), "--cache-dir", str(root), "--json", *(["--team"] if team else []), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def inductor_entries(root: Path, team: bool = False) -> List[Dict[str, Any]]:
    """Every entry of the ``inductor`` namespace under the root, as ``jit-cache ls`` sees it."""
    return [e for e in cli(root, "ls", team=team)["entries"] if e["name"].startswith("inductor/")]


def assert_compiled(report: Dict[str, Any]) -> None:
    assert report["inductor"].get("fxgraph_cache_miss") == 1, f"a cold compile: {report['inductor']}"
    assert report["out"] == pytest.approx(EXPECTED), "the compiled function computes what torch does"


def assert_from_store(report: Dict[str, Any]) -> None:
    assert report["inductor"].get("fxgraph_cache_hit") == 1, (
        f"the FX graph came from the store (the process's own Inductor cache was empty): "
        f"{report['inductor']}"
    )
    assert "fxgraph_cache_miss" not in report["inductor"], report["inductor"]
    assert report["out"] == pytest.approx(EXPECTED), "the stored graph computes what torch does"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A root holding one compile's entries, made by a process with ``JIT_CACHE_TORCH=1`` (the
    ``.pth`` hook, no code change); each test copies it before it changes anything."""
    tmp = tmp_path_factory.mktemp("seeded")
    root = tmp / "root"
    report = run_worker(root, tmp)
    assert_compiled(report)
    assert report["installed"] == "partial", "the hook installed the store's backend"
    yield root


def copy_of(seeded: Path, tmp: Path) -> Path:
    root = tmp / "root"
    shutil.copytree(seeded, root, symlinks=True)
    return root


def test_the_hook_costs_nothing_unless_switched_on_and_then_waits_for_inductor(tmp_path: Path) -> None:
    probe = "import sys; print(sorted(m for m in ('jit_cache', 'jit_cache._torch_hook', 'torch') if m in sys.modules))"
    env = worker_env(tmp_path / "root", tmp_path / "inductor")
    env.pop("JIT_CACHE_TORCH")
    off = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert off.stdout.split("\n")[0] == "[]", "without JIT_CACHE_TORCH the .pth imports nothing"
    on = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "JIT_CACHE_TORCH": "1"}, capture_output=True, text=True, check=True
    )
    assert on.stdout.split("\n")[0] == "['jit_cache', 'jit_cache._torch_hook']", (
        f"with JIT_CACHE_TORCH=1 the .pth installs the hook (the wheel's jit_cache_torch.pth) and "
        f"imports no torch: {on.stdout} {on.stderr[-2000:]}"
    )


def test_a_new_process_gets_its_fx_graph_from_the_store(seeded: Path, tmp_path: Path) -> None:
    root = copy_of(seeded, tmp_path)
    names = [e["name"] for e in inductor_entries(root)]
    prefix = f"inductor/v1/{torch.__version__}/pt2:"
    assert any(n.startswith(prefix + "fx-graph-v1::") for n in names), names
    assert any(n.startswith(prefix + "autograd") for n in names), names
    # install() from code, the environment switch off: the same entries serve it.
    report = run_worker(root, tmp_path, "--install", extra={"JIT_CACHE_TORCH": "0"})
    assert_from_store(report)
    assert report["aot_autograd"].get("autograd_cache_hit") == 1, report["aot_autograd"]
    stats = cli(root, "stats")["stats"]
    assert stats["entries"] == len(names), f"`jit-cache stats` counts the entries: {stats}"
    assert cli(root, "verify")["verify"]["corrupt"] == [], "every entry verifies"
    cli(root, "gc", "--max-size", "0")
    assert inductor_entries(root) == [], "`jit-cache gc` evicts them (no process holds them)"


def test_a_corrupt_entry_is_a_miss_never_an_error_and_is_replaced(seeded: Path, tmp_path: Path) -> None:
    root = copy_of(seeded, tmp_path)
    for entry in inductor_entries(root):
        value = Path(entry["path"]) / "value"
        data = bytearray(value.read_bytes())
        data[len(data) // 2] ^= 0xFF  # same size, other bytes
        os.chmod(value, 0o644)
        value.write_bytes(bytes(data))
    # The store checks the bytes before it answers: a miss with a warning naming the entry, and
    # the compile stores them again.
    report = run_worker(root, tmp_path)
    assert_compiled(report)
    warned = [line for line in report["stderr"].splitlines() if "DamagedEntryWarning" in line]
    assert warned and all("is damaged" in line for line in warned), report["stderr"][-4000:]
    assert cli(root, "verify")["verify"]["corrupt"] == [], "the compile replaced the corrupt entries"
    assert_from_store(run_worker(root, tmp_path))


def test_another_torch_version_never_meets_the_entries(seeded: Path, tmp_path: Path) -> None:
    root = copy_of(seeded, tmp_path)
    before = {e["name"] for e in inductor_entries(root)}
    report = run_worker(root, tmp_path, "--torch-version", "2.99.0+other")
    assert_compiled(report)
    added = {e["name"] for e in inductor_entries(root)} - before
    assert added and all(n.startswith("inductor/v1/2.99.0+other/") for n in added), added


def test_two_processes_starting_together_compile_the_graph_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    start = tmp_path / "start"
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "--start-file", str(start)],
            env=worker_env(root, fresh_inductor_dir(tmp_path)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    start.touch()
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-4000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    misses = sorted(r["inductor"].get("fxgraph_cache_miss", 0) for r in reports)
    hits = sorted(r["inductor"].get("fxgraph_cache_hit", 0) for r in reports)
    assert (misses, hits) == ([0, 1], [0, 1]), f"one compile, the other process waited for it: {reports}"


def _fleet(tmp_path: Path, **remote: str) -> None:
    a = run_worker(tmp_path / "host-a", tmp_path, extra=remote)
    assert_compiled(a)
    b = run_worker(tmp_path / "host-b", tmp_path, extra=remote)
    assert_from_store(b)
    assert inductor_entries(tmp_path / "host-b"), "the fetched entries are published on host b's root"


def test_the_redis_fleet_tier_serves_another_host(tmp_path: Path, redis_url: Tuple[str, Path]) -> None:
    url, _ = redis_url
    _fleet(tmp_path, JIT_CACHE_REMOTE=url)


def test_the_s3_fleet_tier_serves_another_host(tmp_path: Path, s3_env: Dict[str, str]) -> None:
    _fleet(tmp_path, **s3_env)


def test_two_nfs_hosts_compile_once_and_serve_each_other(tmp_path: Path, nfs_hosts: Hosts) -> None:
    root = nfs_hosts.root / "cache"
    start = tmp_path / "start"
    ids = [
        nfs_hosts.start(
            host,
            [sys.executable, WORKER, "--start-file", str(start)],
            worker_env(root, tmp_path / f"inductor-host-{host}"),
        )
        for host in (0, 1)
    ]
    nfs_hosts.wait_ready(ids)
    start.touch()
    reports = nfs_hosts.reports(ids)
    misses = sorted(r["inductor"].get("fxgraph_cache_miss", 0) for r in reports)
    assert misses == [0, 1], f"one host compiled, the other got its graph: {reports}"
    for r in reports:
        assert r["out"] == pytest.approx(EXPECTED)
    # The host that compiled, with a new Inductor cache: served from the root too.
    again = nfs_hosts.reports(
        [nfs_hosts.start(h, [sys.executable, WORKER], worker_env(root, tmp_path / f"again-{h}")) for h in (0, 1)]
    )
    for r in again:
        assert_from_store(r)


def run_worker_as(user: str, root: Path, home: Path) -> Any:
    """The worker as ``user`` (umask 022) on the team root, with an Inductor cache of its own
    under its home. The interpreter, its venvs and the worker are made reachable first when they
    sit under a directory the test users cannot enter (a checkout under ``/root``)."""
    pw = pwd.getpwnam(user)
    places = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(WORKER).resolve()]
    places += [Path(p).resolve() for p in sys.path if p.endswith("site-packages")]

    def become_user() -> None:
        reachable_by_everyone(*places)
        os.setgid(pw.pw_gid)
        os.setgroups([pw.pw_gid])
        os.setuid(pw.pw_uid)
        os.umask(0o022)

    out = subprocess.run(
        [sys.executable, WORKER],
        env=worker_env(root, home / "inductor", JIT_CACHE_TEAM="1", HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=home,
        preexec_fn=become_user,
    )
    assert out.returncode == 0, f"worker as {user} failed ({out.returncode}):\n{out.stderr[-4000:]}"
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["stderr"] = out.stderr
    return report


def test_a_team_root_is_shared_by_two_users(team: Team) -> None:
    reports = [run_worker_as(user, team.root, team.homes[user]) for user in team.users]
    assert_compiled(reports[0])
    assert_from_store(reports[1])  # the second user's process, its own Inductor cache empty
    entries = inductor_entries(team.root, team=True)
    assert entries, "the first user's compile stored its entries"
    for entry in entries:
        for path in [Path(entry["path"]), *Path(entry["path"]).iterdir()]:
            assert path.stat().st_gid == team.gid, f"{path} belongs to the team's group"


def test_kill_9_in_the_put_leaves_nothing_torn(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for point, whole in (("write-before", 0), ("write-after", 0), ("commit-after", 1)):
        out = run_worker(root, tmp_path, "--kill-at", point, check=False)
        assert out.returncode == -9, f"killed at {point}: {out.returncode}\n{out.stderr[-3000:]}"
        entries = inductor_entries(root)
        assert len(entries) == whole, f"after a kill at {point}: {entries}"
        assert cli(root, "verify")["verify"]["corrupt"] == [], f"nothing torn after a kill at {point}"
    # The entry the last one published serves a new process; nothing waits for the dead.
    report = run_worker(root, tmp_path)
    assert_from_store(report)


