"""``--database``: directories, a real Redis server shared between runs, read-only and combined stores.

The Redis tests start a real ``redis-server`` (Debian's package; ``.ci/run`` installs it) on a free
loopback port, with persistence off, and stop it at teardown.  They skip, saying why, only where
the server binary or the ``redis`` client (``gradspec[redis]``) is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from gradspec._private import database as db
from tests.test_cli import FAST_ORACLES, gradspec, plant, summary

SPECS = [
    pytest.param(["d"], "DirectoryBasedExampleDatabase", id="directory"),
    pytest.param(["ro:d"], "ReadOnlyDatabase", id="read-only-directory"),
    pytest.param(["d", "ro:e"], "MultiplexedDatabase", id="local-plus-shared-read-only"),
]


@pytest.mark.parametrize("specs, kind", SPECS)
def test_specs_open_the_right_database(tmp_path, monkeypatch, specs, kind):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e").mkdir()
    assert type(db.open_database(specs)).__name__ == kind


def test_directories_become_absolute_and_urls_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert db.normalise(["x", "ro:y", "redis://h:1/0"]) == [str(tmp_path / "x"), "ro:" + str(tmp_path / "y"),
                                                          "redis://h:1/0"]


def test_passwords_are_not_shown():
    shown = db.describe(["ro:redis://:s3cret@cache:6379/0"])
    assert "s3cret" not in shown and "cache:6379/0" in shown and "read-only" in shown


BAD = [
    pytest.param(["afile"], "not a directory", id="file-in-the-way"),
    pytest.param(["redis://127.0.0.1:1/0"], "does not answer", id="no-server"),
    pytest.param([""], "expected a directory", id="empty"),
]


@pytest.mark.parametrize("specs, words", BAD)
def test_unusable_specs_say_why(tmp_path, monkeypatch, specs, words):
    pytest.importorskip("redis", reason="the redis client (gradspec[redis]) is not installed")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(db.DatabaseSpecError, match=words):
        db.open_database(specs, check=True)


def test_cli_refuses_an_unreachable_server_as_usage_error(tmp_path):
    pytest.importorskip("redis", reason="the redis client (gradspec[redis]) is not installed")
    r = gradspec("fuzz", "--database", "redis://127.0.0.1:1/0", "--max-examples", "1", "--oracles", FAST_ORACLES,
                 "--report-dir", tmp_path / "r", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "does not answer" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------------
# a real Redis server
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    pytest.importorskip("redis", reason="the redis client (gradspec[redis]) is not installed")
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    import redis

    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.skip("redis-server did not start within 5 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _keys(url) -> int:
    import redis

    return len(redis.Redis.from_url(url).keys("gradspec-example:*"))


def _fuzz(root, name, env, *extra, examples=60, seed=1):
    here = root / name
    here.mkdir()
    r = gradspec("fuzz", "--engine", "gsplant:bug", "--ops", "exp,add", "--oracles", FAST_ORACLES,
                 "--max-examples", examples, "--seed", seed, "--report-dir", here / "reports", "-q", *extra,
                 cwd=here, env=env, timeout=240)
    return r, here / "reports"


def test_a_failure_saved_by_one_run_is_replayed_first_by_the_next(tmp_path, redis_url):
    env = plant(tmp_path)
    r1, rep1 = _fuzz(tmp_path, "machine-a", env, "--database", redis_url)
    assert r1.returncode == 1, r1.stdout + r1.stderr
    assert _keys(redis_url) > 0, "run 1 saved nothing in Redis"
    # Run 2: another directory (no shared disk), another seed, a budget of one generated case.
    r2, rep2 = _fuzz(tmp_path, "machine-b", env, "--database", redis_url, examples=1, seed=99)
    assert r2.returncode == 1, r2.stdout + r2.stderr
    s = summary(rep2)
    assert s["replayed"] >= 1, s
    assert any("example database" in (rec.get("note") or "") for rec in s["reports"]), s["reports"]


def test_read_only_store_is_read_but_never_written(tmp_path, redis_url):
    env = plant(tmp_path)
    r0, _ = _fuzz(tmp_path, "ci", env, "--database", "local-db", "--database", "ro:" + redis_url)
    assert r0.returncode == 1, r0.stdout + r0.stderr
    assert _keys(redis_url) == 0, "a read-only store was written to"
    assert any((tmp_path / "ci" / "local-db").rglob("*")), "the writable local store got nothing"
    # ...and what the team saved is read: seed the shared store with a writable run, then replay read-only.
    _fuzz(tmp_path, "team", env, "--database", redis_url)
    before = _keys(redis_url)
    r2, rep2 = _fuzz(tmp_path, "ci2", env, "--database", "ro:" + redis_url, examples=1, seed=5)
    assert r2.returncode == 1 and summary(rep2)["replayed"] >= 1
    assert _keys(redis_url) == before
