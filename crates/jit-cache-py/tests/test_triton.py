"""jit_cache.triton with the real triton package (no GPU: Triton's bundled ptxas makes cubins):
cold and warm compiles in new processes, one compile per kernel among 8 racing processes (local
and shared protocol), kill -9 at every point of the put sequence, eviction while a process holds
the paths, a team root of two users, a producer that never calls put_group, the fleet tier and
RemoteBackend on a real redis-server, a launcher stub outside any group, and the triton_key
identity cache."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import jit_cache
from conftest import Team, reachable_by_everyone, redis_cli

if os.environ.get("XTASK_TEST") == "1":
    import triton  # cargo xtask setup installs it: missing, the suite fails
else:
    triton = pytest.importorskip("triton")

WORKER = str(Path(__file__).with_name("triton_worker.py"))
KERNELS = ["add", "scale", "relu", "row_sum"]
GROUP_FILES = {"source", "ttir", "ttgir", "llir", "ptx", "cubin", "json"}


def worker_env(root: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env["JIT_CACHE_DIR"] = str(root)
    env["TRITON_CACHE_DIR"] = f"{root}-triton-own"
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env.pop("TRITON_CACHE_MANAGER", None)
    env.update(extra)
    return env


def run_worker(root: Path, *args: str, env: dict | None = None, check: bool = True):
    out = subprocess.run(
        [sys.executable, WORKER, *args],
        env=env or worker_env(root),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert out.returncode == 0, f"worker {args} failed ({out.returncode}):\n{out.stderr[-4000:]}"
        return json.loads(out.stdout.strip().splitlines()[-1])
    return out


def listed(root: Path) -> list:
    """Every entry under the root, as `jit-cache ls --json` sees it."""
    cli = jit_cache.launcher_path()
    out = subprocess.run(
        [cli, "--cache-dir", str(root), "--json", "ls"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)["entries"]


def stored_groups(root: Path) -> list:
    """Every Triton group entry under the root."""
    return [e for e in listed(root) if e["name"].startswith("triton/group/")]


def test_a_cold_compile_is_stored_and_a_new_process_compiles_nothing(tmp_path):
    root = tmp_path / "cache"
    cold = run_worker(root, "add", "scale")
    assert cold["compiles"] == 2 and cold["hits"] == 0, cold
    for name, kernel in cold["kernels"].items():
        exts = {Path(p).suffix[1:] for p in kernel["paths"].values()}
        assert exts == GROUP_FILES, f"{name}: the group holds Triton's seven files: {exts}"
        for path in kernel["paths"].values():
            assert os.path.exists(path), f"put_group answers with the published paths: {path}"
    warm = run_worker(root, "add", "scale")
    assert warm["compiles"] == 0 and warm["hits"] == 2, f"a new process compiles nothing: {warm}"
    for name in ("add", "scale"):
        assert warm["kernels"][name]["cubin_sha256"] == cold["kernels"][name]["cubin_sha256"]
        assert warm["kernels"][name]["paths"] == cold["kernels"][name]["paths"], (
            "the warm group is the cold one's entry"
        )
    # Triton's own cache directory was never written.
    assert not Path(f"{root}-triton-own").exists()
    # TRITON_ALWAYS_COMPILE compiles anyway, and leaves the store as it was.
    before = sorted(e["name"] for e in listed(root))
    forced = run_worker(root, "add", env=worker_env(root, TRITON_ALWAYS_COMPILE="1"))
    assert forced["compiles"] == 1 and forced["kernels"]["add"]["cubin_sha256"] == warm["kernels"]["add"]["cubin_sha256"]
    assert sorted(e["name"] for e in listed(root)) == before, "no entry added or replaced"


def test_the_store_is_exactly_what_triton_compiled(tmp_path):
    root = tmp_path / "cache"
    ours = run_worker(root, "relu")
    theirs = run_worker(root, "--manager", "triton", "relu")
    assert theirs["compiles"] == 1
    assert ours["kernels"]["relu"]["cubin_sha256"] == theirs["kernels"]["relu"]["cubin_sha256"]
    for name, path in ours["kernels"]["relu"]["paths"].items():
        other = theirs["kernels"]["relu"]["paths"][name]
        assert Path(path).read_bytes() == Path(other).read_bytes(), f"{name}: the same bytes"


def race(root: Path, processes: int, kernels: list, manager: str = "jit_cache", **env) -> list:
    """Starts `processes` workers that compile `kernels` (each in its own order) together."""
    start = root.parent / f"start-{manager}"
    procs = []
    for i in range(processes):
        order = kernels[i % len(kernels):] + kernels[: i % len(kernels)]
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "--manager", manager, "--start-file", str(start), *order],
                env=worker_env(root, **env),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()[-4000:]
    start.touch()
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-4000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@pytest.mark.parametrize("sharing", ["local", "shared"])
def test_eight_processes_compiling_four_kernels_compile_each_once(tmp_path, sharing):
    # `shared` is the protocol an NFS or Lustre root gets (publication notes, stamp pins).
    root = tmp_path / "cache"
    reports = race(root, 8, KERNELS, JIT_CACHE_SHARING=sharing)
    compiles = sum(r["compiles"] for r in reports)
    assert compiles == 4, f"one compile per kernel among 8 processes, counted {compiles}"
    assert sum(r["hits"] for r in reports) == 8 * 4 - 4
    for name in KERNELS:
        digests = {r["kernels"][name]["cubin_sha256"] for r in reports}
        assert len(digests) == 1, f"every process got the producer's {name} cubin"


KILL_POINTS = (
    [f"put-{i}-{when}" for i in range(1, 8) for when in ("before", "after")]
    + ["commit-before", "commit-after"]
)


def test_kill_9_at_every_point_of_the_put_sequence_leaves_no_partial_group(tmp_path):
    root = tmp_path / "cache"
    expected = run_worker(tmp_path / "reference", "add")["kernels"]["add"]["cubin_sha256"]
    for point in KILL_POINTS:
        killed = run_worker(root, "--kill-at", point, "add", check=False)
        assert killed.returncode == -9, f"{point}: the worker was killed there ({killed.stderr[-2000:]})"
        groups = stored_groups(root)
        if point != "commit-after":
            assert groups == [], f"{point}: a kill before the commit publishes nothing: {groups}"
            after = run_worker(root, "add")
            assert after["compiles"] == 1, f"{point}: the next process compiles: {after}"
            assert after["kernels"]["add"]["cubin_sha256"] == expected
            # Start over for the next point.
            store_clear(root)
        else:
            after = run_worker(root, "add")
            assert after["compiles"] == 0, f"{point}: the published group is whole: {after}"
            assert after["kernels"]["add"]["cubin_sha256"] == expected


def store_clear(root: Path) -> None:
    subprocess.run(
        [jit_cache.launcher_path(), "--cache-dir", str(root), "clear"],
        check=True,
        capture_output=True,
    )


def test_an_entry_gc_evicts_stays_readable_for_the_process_holding_its_paths(tmp_path):
    root = tmp_path / "cache"
    holder = subprocess.Popen(
        [sys.executable, WORKER, "--hold", "add"],
        env=worker_env(root),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    report = json.loads(holder.stdout.readline())
    assert report["compiles"] == 1
    gc = subprocess.run(
        [jit_cache.launcher_path(), "--cache-dir", str(root), "--json", "gc", "--max-size", "0"],
        capture_output=True,
        text=True,
    )
    assert gc.returncode == 0, gc.stderr
    holder.stdin.write("go\n")
    holder.stdin.flush()
    line = holder.stdout.readline()
    assert holder.wait(60) == 0 and line, (
        f"the holder reads every path after the gc: {holder.stderr.read()[-2000:]}"
    )
    read = json.loads(line)
    paths = report["kernels"]["add"]["paths"]
    assert set(read["read_after_gc"]) == set(paths), "every path of the group read after the gc"
    # Once the holder is gone, gc evicts it and the next process compiles again.
    subprocess.run(
        [jit_cache.launcher_path(), "--cache-dir", str(root), "gc", "--max-size", "0"],
        check=True,
        capture_output=True,
    )
    assert stored_groups(root) == [], "unpinned, the entry is evicted"
    assert run_worker(root, "add")["compiles"] == 1


def _compile_as(user: str, root: Path, home: Path) -> dict:
    """Compiles `add` into the team root in a forked child running as `user` (umask 022).

    Forked, not spawned: the child uses the modules its parent (warmed up by one compile)
    already loaded, and what it still reads of the venv (Triton's ptxas, lazy imports) it
    reaches through `reachable_by_everyone` when the checkout is under a directory the test
    users cannot enter.
    """
    import triton_worker

    import jit_cache.triton as jt

    pw = pwd.getpwnam(user)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            # The interpreter, Triton and its ptxas live in this checkout's venv.
            reachable_by_everyone(Path(sys.prefix).resolve())
            os.setgid(pw.pw_gid)
            os.setgroups([pw.pw_gid])
            os.setuid(pw.pw_uid)
            os.umask(0o022)
            os.environ.update(JIT_CACHE_DIR=str(root), JIT_CACHE_TEAM="1", HOME=str(home))
            events = []
            triton.knobs.cache.manager_class = jt.CacheManager
            triton.knobs.compilation.listener = lambda **kw: events.append(kw["cache_hit"])
            compiled = triton.compile(triton_worker.source("add"), target=triton_worker.TARGET)
            report = {"compiles": events.count(False), "hits": events.count(True),
                      "cubin": len(compiled.asm["cubin"]), "uid": os.getuid()}
        except BaseException as e:  # reported to the parent, which asserts on it
            report = {"error": repr(e)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_a_team_root_is_shared_by_two_users(team: Team, tmp_path, monkeypatch):
    import triton_worker

    # Warm up this process (every module a compile imports), in Triton's own cache.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm-up"))
    triton.compile(triton_worker.source("add"), target=triton_worker.TARGET)
    reports = [_compile_as(user, team.root, team.homes[user]) for user in team.users]
    assert reports[0].get("compiles") == 1, reports[0]
    assert reports[1].get("compiles") == 0 and reports[1]["hits"] == 1, (
        f"the second user hits the first one's entry: {reports[1]}"
    )
    assert reports[0]["uid"] != reports[1]["uid"]


def test_install_answers_triton_key_from_the_identity_cache_and_stays_exact(tmp_path):
    root = tmp_path / "cache"
    first = run_worker(root, "--install", "add")
    assert first["key_from_cache"] is False, "the first process on a host runs Triton's own"
    second = run_worker(root, "--install", "add")
    assert second["key_from_cache"] is True and second["compiles"] == 0, second
    # The answer is Triton's own key, exactly.
    probe = (
        "import jit_cache.triton, triton.runtime.cache as c\n"
        "original = c.triton_key\n"
        "jit_cache.triton.install(cache_manager=False)\n"
        "print(c.triton_key() == original())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=worker_env(root), capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    # Each recorded input is checked: a stat tuple that moved, or one that was not yet settled
    # when Triton read it (git's racy rule), falls back to Triton's own function.
    record_path = next((root / "v2" / "state").glob("triton-key-*.json"))
    record = json.loads(record_path.read_text())
    assert any(p.endswith("libtriton.so") for p, _ in record["inputs"]), record["inputs"][:5]
    for forge in ("size", "racy"):
        forged = json.loads(json.dumps(record))
        if forge == "size":
            forged["inputs"][0][1][2] += 1
        else:
            newest = max(max(st[3], st[4]) for _, st in forged["inputs"])
            forged["read_at_ns"] = newest + 1
        record_path.write_text(json.dumps(forged))
        again = run_worker(root, "--install", "add")
        assert again["key_from_cache"] is False, f"{forge}: falls back to Triton's function"
        assert again["compiles"] == 0, "and finds the same key: a hit"


def _digests_covered(value: str, version: str, inputs: list) -> list:
    """The digests of Triton's key (its version, then one sha256 per file it hashed) that no
    recorded input's content has: empty when the record lists every file the key covers."""
    import hashlib

    assert value.startswith(version), value[:40]
    wanted = set(value[len(version):].split("-"))
    have = set()
    for path, _ in inputs:
        if os.path.isfile(path):
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            have.add(h.hexdigest())
    return sorted(wanted - have)


def test_two_threads_asking_triton_key_first_get_its_key_and_save_a_whole_record(tmp_path):
    # Both threads make their first call at once: each gets Triton's own key, and the record
    # saved lists every file whose digest the key holds (triton/language's included), so an
    # in-place edit of any of them falls back to Triton's function.
    root = tmp_path / "cache"
    probe = (
        "import json, threading, jit_cache.triton, triton.runtime.cache as c\n"
        "original = c.triton_key\n"
        "jit_cache.triton.install(cache_manager=False)\n"
        "start = threading.Barrier(2)\n"
        "got = []\n"
        "def ask():\n"
        "    start.wait()\n"
        "    try:\n"
        "        got.append(c.triton_key())\n"
        "    except Exception as e:\n"
        "        got.append(repr(e))\n"
        "threads = [threading.Thread(target=ask) for _ in range(2)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(json.dumps({'got': got, 'own': original()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=worker_env(root), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["got"] == [report["own"]] * 2, [g[:80] for g in report["got"]]
    records = list((root / "v2" / "state").glob("triton-key-*.json"))
    assert records, "a settled install saves its record"
    record = json.loads(records[0].read_text())
    language = os.path.join(os.path.dirname(triton.__file__), "language") + os.sep
    assert any(p.startswith(language) for p, _ in record["inputs"]), "triton/language is listed"
    missing = _digests_covered(record["key"], triton.__version__, record["inputs"])
    assert not missing, f"{len(missing)} hashed files are not in the record"


def test_a_record_that_does_not_cover_the_key_is_never_saved(tmp_path):
    # A triton_key that reads a file the recording cannot see (on another thread) answers, and
    # its record is not saved: a later process runs the function again.
    root = tmp_path / "cache"
    hidden = tmp_path / "hidden.py"
    hidden.write_text("x = 1\n")
    old = time.time() - 60
    os.utime(hidden, (old, old))
    probe = (
        "import hashlib, json, threading, triton, jit_cache.triton, triton.runtime.cache as c\n"
        f"hidden = {str(hidden)!r}\n"
        "def own():\n"
        "    out = []\n"
        "    def read():\n"
        "        with open(hidden, 'rb') as f:\n"
        "            out.append(hashlib.sha256(f.read()).hexdigest())\n"
        "    t = threading.Thread(target=read); t.start(); t.join()\n"
        "    return triton.__version__ + out[0]\n"
        "c.triton_key = own\n"
        "jit_cache.triton.install(cache_manager=False)\n"
        "print(json.dumps({'got': c.triton_key(), 'own': own()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=worker_env(root), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["got"] == report["own"], report
    saved = list((root / "v2" / "state").glob("triton-key-*.json"))
    assert not saved, f"an incomplete record was saved: {saved[0].read_text()[:300]}"


def test_the_fleet_tier_serves_a_group_to_another_host_and_refuses_corrupt_bytes(tmp_path, redis_url):
    url, sock = redis_url
    a = run_worker(tmp_path / "host-a", "add", env=worker_env(tmp_path / "host-a", JIT_CACHE_REMOTE=url))
    assert a["compiles"] == 1
    b = run_worker(tmp_path / "host-b", "add", env=worker_env(tmp_path / "host-b", JIT_CACHE_REMOTE=url))
    assert b["compiles"] == 0, f"another host's root is served from the fleet tier: {b}"
    assert b["kernels"]["add"]["cubin_sha256"] == a["kernels"]["add"]["cubin_sha256"]
    # Every blob replaced by other bytes: a third host refuses them (blake3) and compiles.
    blobs = redis_cli(sock, "--scan", "--pattern", "*:b:*").split()
    assert blobs, "the group's files were uploaded as blobs"
    for blob in blobs:
        redis_cli(sock, "SET", blob, "not the bytes the manifest names")
    c = run_worker(tmp_path / "host-c", "add", env=worker_env(tmp_path / "host-c", JIT_CACHE_REMOTE=url))
    assert c["compiles"] == 1, f"corrupt remote bytes are a miss: {c}"
    assert c["kernels"]["add"]["cubin_sha256"] == a["kernels"]["add"]["cubin_sha256"]


def test_the_s3_fleet_tier_serves_a_group_to_another_host(tmp_path, s3_env):
    a = run_worker(tmp_path / "host-a", "add", "scale", env=worker_env(tmp_path / "host-a", **s3_env))
    assert a["compiles"] == 2
    b = run_worker(tmp_path / "host-b", "add", "scale", env=worker_env(tmp_path / "host-b", **s3_env))
    assert b["compiles"] == 0, f"another host's root is served from the S3 tier: {b}"
    for kernel in ("add", "scale"):
        assert b["kernels"][kernel]["cubin_sha256"] == a["kernels"][kernel]["cubin_sha256"]


def test_two_nfs_hosts_compile_each_kernel_once_and_serve_each_other(tmp_path, nfs_hosts):
    # One root on the simulated export (the shared protocol: FUSE is detected as shared), two
    # processes on each host compiling the same four kernels together.
    root = nfs_hosts.root / "cache"
    start = tmp_path / "start"
    ids = []
    for i, host in enumerate([0, 1, 0, 1]):
        order = KERNELS[i:] + KERNELS[:i]
        ids.append(
            nfs_hosts.start(host, [sys.executable, WORKER, "--start-file", str(start), *order], worker_env(root))
        )
    nfs_hosts.wait_ready(ids)
    start.touch()
    reports = nfs_hosts.reports(ids)
    compiles = sum(r["compiles"] for r in reports)
    assert compiles == len(KERNELS), f"one compile per kernel across both hosts, counted {compiles}"
    for name in KERNELS:
        digests = {r["kernels"][name]["cubin_sha256"] for r in reports}
        assert len(digests) == 1, f"every process on either host got the producer's {name} cubin"
    # A new process on each host afterwards: every group is a hit, on the host that compiled it
    # and on the other.
    again = nfs_hosts.reports([nfs_hosts.start(h, [sys.executable, WORKER, *KERNELS], worker_env(root)) for h in (0, 1)])
    assert [r["compiles"] for r in again] == [0, 0], again
    stats = nfs_hosts.reports(
        [nfs_hosts.start(1, [jit_cache.launcher_path(), "--cache-dir", str(root), "--json", "stats"], {})]
    )[0]["stats"]
    assert (stats["filesystem"], stats["protocol"]) == ("fuse", "shared"), stats


def test_remote_backend_serves_triton_s_remote_cache_manager(tmp_path, redis_url):
    url, _ = redis_url
    reports = []
    for host in ("host-a", "host-b"):
        env = worker_env(
            tmp_path / host,
            JIT_CACHE_REMOTE=url,
            TRITON_CACHE_MANAGER="triton.runtime.cache:RemoteCacheManager",
            TRITON_REMOTE_CACHE_BACKEND="jit_cache.triton:RemoteBackend",
        )
        reports.append(run_worker(tmp_path / host, "--manager", "triton", "add", env=env))
    assert reports[0]["compiles"] == 1
    assert reports[1]["compiles"] == 0, f"the second host's RemoteCacheManager hits: {reports[1]}"
    assert reports[1]["kernels"]["add"]["cubin_sha256"] == reports[0]["kernels"]["add"]["cubin_sha256"]


WAITER = """
import json, os, sys, time
import jit_cache.triton as jt
jt.store()
print("asking", flush=True)
started = time.monotonic()
manager = jt.CacheManager("KEYOFTHETEST")
group = manager.get_group("k.json")
print(json.dumps({"group": group, "producer": manager._producer is not None,
                  "private": manager._private is not None,
                  "waited": time.monotonic() - started}), flush=True)
"""


def test_a_producer_that_never_calls_put_group_releases_the_key(tmp_path, monkeypatch):
    import jit_cache._env_store as env_store
    import jit_cache.triton as jt

    root = tmp_path / "cache"
    monkeypatch.setenv("JIT_CACHE_DIR", str(root))
    # A fresh store on this root: the process's one store is `jit_cache._env_store`'s.
    monkeypatch.setattr(env_store, "_store", None)
    monkeypatch.setattr(jt, "_held", __import__("collections").OrderedDict())
    holder = jt.CacheManager("KEYOFTHETEST")
    assert holder.get_group("k.json") is None and holder._producer is not None
    holder.put(b"half a compile", "k.ttir")

    def waiter(wait: str) -> subprocess.Popen:
        env = worker_env(root, JIT_CACHE_TRITON_WAIT=wait)
        return subprocess.Popen(
            [sys.executable, "-c", WAITER], env=env, stdout=subprocess.PIPE, text=True
        )

    # A waiter whose wait runs out compiles privately, uncached.
    bounded = json.loads(waiter("0.5").communicate(timeout=60)[0].splitlines()[-1])
    assert bounded["group"] is None and bounded["private"] and not bounded["producer"], bounded
    assert 0.4 < bounded["waited"] < 30, bounded
    # A patient waiter becomes the producer once the holder is dropped without `put_group`.
    patient = waiter("60")
    assert patient.stdout.readline().strip() == "asking"
    # Usually the waiter is in its wait by now; the outcome is the same if it asks after this.
    del holder
    report = json.loads(patient.communicate(timeout=60)[0].splitlines()[-1])
    assert report["producer"] and report["group"] is None, report
    assert jit_cache.Store(root).get("triton", "group/KEYOFTHETEST/k.json") is None, (
        "nothing of the dropped producer was published"
    )


STUB = r'''
import json
import triton, triton.runtime.build as build
import jit_cache.triton as jt
triton.knobs.cache.manager_class = jt.CacheManager
built = []
real = build._build
build._build = lambda *a, **kw: built.append(a[0]) or real(*a, **kw)
SRC = """
#include <Python.h>
static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "jc_stub", NULL, -1, methods};
PyMODINIT_FUNC PyInit_jc_stub(void) { return PyModule_Create(&def); }
"""
mod = build.compile_module_from_src(SRC, "jc_stub")
print(json.dumps({"built": len(built), "answer": mod.answer(), "file": mod.__file__}))
'''


def test_a_launcher_stub_is_a_file_entry_built_once(tmp_path):
    """Triton builds its launcher stubs through `get_file` and `put`, outside any group."""
    root = tmp_path / "cache"
    reports = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", STUB], env=worker_env(root), capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-3000:]
        reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert [r["built"] for r in reports] == [1, 0], f"built once, then loaded from the store: {reports}"
    assert reports[0]["answer"] == reports[1]["answer"] == 42
    assert reports[0]["file"] == reports[1]["file"], "the second process loads the stored file"
    files = [e["name"] for e in listed(root) if e["name"].startswith("triton/file/")]
    assert len(files) == 1 and files[0].endswith("/jc_stub" + sysconfig.get_config_var("EXT_SUFFIX")), files


def test_a_remote_that_is_down_costs_nothing_but_its_fetch(tmp_path):
    """JIT_CACHE_REMOTE naming a server that is not there: compiles and hits stay local."""
    root = tmp_path / "cache"
    env = worker_env(root, JIT_CACHE_REMOTE=f"redis+unix://{tmp_path / 'no-such.sock'}")
    cold = run_worker(root, "add", env=env)
    assert cold["compiles"] == 1, cold
    warm = run_worker(root, "add", env=env)
    assert warm["compiles"] == 0 and warm["hits"] == 1, f"the local entry answers: {warm}"
