"""Attacks on the on-disk caches, as a user would mount them.

Every cache memsym keeps (built terms, the report's entries; estimate, params and search
keep none: they read the generated evaluators) is warmed by real commands, then poisoned: each file replaced by a pickle whose
loading writes a marker (Python files get code appended), or every digit in it changed.  The next
runs must run no code and print what a run with every cache off prints.  With two local users (made
here with useradd, run with setpriv; CI runs as root, where these tests cannot skip), a cache folder
another user owns or can write is never used: entries planted there under the names the victim's
run would read run nothing.  The expectations are runs with MEMSYM_CACHE=0 (no cache code at all).
"""
from __future__ import annotations

import os
import pickle
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The commands whose caches are attacked: estimate (none: a poisoned cache must not reach it either),
#: fit (the built terms; search keeps nothing: its kernels are generated), report
#: (computed report, rendered files, closed forms, notebooks' HTML).
COMMANDS = [
    ["-m", "memsym", "estimate", "--zero", "1", "--json"],
    ["-m", "memsym", "estimate", "--gpu", "h100"],
    ["-m", "memsym", "fit", "--hbm", "80GiB", "--json"],
    ["-m", "memsym", "report", "--model", "deepseek-v2-lite", "--dp", "8", "--tp", "1", "--pp", "1", "--ep", "8",
     "--format", "md,html", "--out", "{out}"],
]


class Planted:
    """A pickle whose loading appends to ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'a').write('x')",))


def run_all(env, out, user_args=()):
    """Each command's exit status, stdout and written report files, run with ``env``."""
    results = []
    for i, argv in enumerate(COMMANDS):
        target = out / f"report-{i}"
        argv = [a.replace("{out}", str(target)) for a in argv]
        p = subprocess.run([*user_args, sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
        files = {f.name: f.read_bytes() for f in sorted(target.iterdir())} if target.is_dir() else {}
        shutil.rmtree(target, ignore_errors=True)
        results.append((argv[-1] if argv[0] == "-c" else " ".join(argv[2:4]), p.returncode,
                        p.stdout.replace(str(target), "{out}"), files))
    return results


def poison(folder: Path, marker: Path, how: str) -> int:
    """Replace every file under ``folder`` (``pickle``: by a payload; ``.py`` files get code appended)
    or change every digit 6 to 7 in it (``digits``).  Returns how many files were touched."""
    n = 0
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        n += 1
        if how == "digits":
            path.write_bytes(path.read_bytes().replace(b"6", b"7"))
        elif path.suffix == ".py":
            with open(path, "a") as f:
                f.write(f"\nopen({str(marker)!r}, 'a').write('x')\n")
        else:
            path.write_bytes(pickle.dumps(Planted(marker)))
    return n


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """Every command run with every cache off."""
    base = tmp_path_factory.mktemp("truth")
    env = {**os.environ, "MEMSYM_CACHE": "0", "HOME": str(base)}
    env.pop("MEMSYM_CACHE_DIR", None)
    return run_all(env, base)


@pytest.mark.parametrize("how", ["pickle", "digits"])
def test_a_poisoned_cache_runs_nothing_and_changes_no_number(truth, tmp_path, how):
    cache = tmp_path / "cache"
    env = {**os.environ, "MEMSYM_CACHE_DIR": str(cache)}
    env.pop("MEMSYM_CACHE", None)
    assert run_all(env, tmp_path) == truth            # cold
    kinds = sorted(p.name for p in cache.iterdir() if p.is_dir())
    assert {"report", "terms"} <= set(kinds), kinds
    marker = tmp_path / "ran"
    assert poison(cache, marker, how) >= 10
    assert run_all(env, tmp_path) == truth and not marker.exists()
    assert run_all(env, tmp_path) == truth and not marker.exists()   # and again, from what was rebuilt


# ----------------------------------------------------------------------------- two local users
def _require_root():
    if os.geteuid() == 0 and shutil.which("useradd") and shutil.which("setpriv"):
        return
    if os.environ.get("MEMSYM_REQUIRE_USERS") == "1":
        pytest.fail("the two-user cache tests need root, useradd and setpriv (CI runs as root)")
    pytest.skip("the two-user cache tests need root, useradd and setpriv (CI runs them as root)")


def _user(name: str):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def _traversable(*paths):
    """Let other users reach ``paths`` (the interpreter, the checkout): add search (x) permission to
    each folder above them that lacks it, returning what to restore.  Nothing becomes listable or
    readable that was not."""
    changed = []
    for path in paths:
        p = Path(path).resolve()
        for d in [*reversed(p.parents), p] if p.is_dir() else reversed(p.parents):
            m = d.stat().st_mode
            if not m & stat.S_IXOTH:
                os.chmod(d, stat.S_IMODE(m) | stat.S_IXOTH)
                changed.append((d, stat.S_IMODE(m)))
    return changed


@pytest.fixture(scope="module")
def users():
    _require_root()
    alice, bob = _user("memsym-alice"), _user("memsym-bob")
    changed = _traversable(os.path.realpath(sys.executable), sys.prefix, ROOT)
    try:
        yield alice, bob
    finally:
        for d, m in reversed(changed):
            os.chmod(d, m)


def as_user(pw):
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--"]


def user_env(home: Path, **extra):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def shared(users, tmp_path_factory):
    """A world-writable, sticky folder (like /tmp) the two users share; homes for each."""
    alice, bob = users
    top = Path(tempfile.mkdtemp(prefix="memsym-users-"))
    os.chmod(top, 0o1777)
    homes = {}
    for pw in (alice, bob):
        h = top / f"home-{pw.pw_name}"
        h.mkdir(mode=0o700)
        os.chown(h, pw.pw_uid, pw.pw_gid)
        homes[pw.pw_name] = h
    yield top, homes
    shutil.rmtree(top, ignore_errors=True)


def _plant(folder: Path, marker: Path, owner) -> None:
    """Bob's attack: his own run fills ``folder`` with entries under the names any run of this
    install reads; he replaces each by a payload and lets anyone read them (only he can write:
    the folder is refused for its owner alone)."""
    poison(folder, marker, "pickle")
    for p in [folder, *folder.rglob("*")]:
        os.chown(p, owner.pw_uid, owner.pw_gid, follow_symlinks=False)
        if not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


@pytest.mark.parametrize("where", ["bob-owned folder", "bob-owned XDG folder", "link to bob's folder",
                                   "alice's folder others can write"])
def test_a_folder_another_user_can_write_is_never_used(users, shared, truth, where):
    alice, bob = users
    top, homes = shared
    marker = top / "ran"
    planted = top / "planted"
    # bob's own run makes entries under the names alice's run would read (one install, one key scheme)
    bob_env = user_env(homes["memsym-bob"], MEMSYM_CACHE_DIR=planted)
    subprocess.run([*as_user(bob), sys.executable, "-m", "memsym", "estimate", "--zero", "1", "--json"], cwd=ROOT,
                   env=bob_env, capture_output=True, timeout=300, check=True)
    subprocess.run([*as_user(bob), sys.executable, "-m", "memsym", "fit", "--hbm", "80GiB", "--json"], cwd=ROOT,
                   env=bob_env, capture_output=True, timeout=300, check=True)
    assert (planted / "terms").is_dir()
    _plant(planted, marker, bob)
    if where == "bob-owned folder":
        env = user_env(homes["memsym-alice"], MEMSYM_CACHE_DIR=planted)
    elif where == "bob-owned XDG folder":
        xdg = top / "xdg"
        xdg.mkdir(mode=0o777)
        os.chmod(xdg, 0o1777)
        shutil.move(str(planted), str(xdg / "memsym"))
        env = user_env(homes["memsym-alice"], XDG_CACHE_HOME=xdg)
    elif where == "link to bob's folder":
        link = top / "alice-cache"
        os.symlink(planted, link)
        os.lchown(link, bob.pw_uid, bob.pw_gid)
        env = user_env(homes["memsym-alice"], MEMSYM_CACHE_DIR=link)
    else:  # alice's own folder, but others may write it: bob's entries moved in
        mine = top / "alice-own"
        shutil.copytree(planted, mine, symlinks=True)
        for p in [mine, *mine.rglob("*")]:
            os.chown(p, alice.pw_uid, alice.pw_gid, follow_symlinks=False)
        for p in [mine, *mine.rglob("*")]:
            os.chmod(p, 0o777 if p.is_dir() else 0o666)
        env = user_env(homes["memsym-alice"], MEMSYM_CACHE_DIR=mine)
    results = []
    for argv in (["estimate", "--zero", "1", "--json"], ["fit", "--hbm", "80GiB", "--json"]):
        p = subprocess.run([*as_user(alice), sys.executable, "-m", "memsym", *argv], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        results.append((p.returncode, p.stdout))
        uses_cache = argv[0] == "fit"  # estimate keeps nothing (it reads the generated evaluators)
        assert p.stderr.count("memsym: cache not used") == uses_cache and p.stderr.count("\n") == uses_cache, p.stderr
        assert not uses_cache or ("writable by" if where.startswith("alice") else "owned by uid") in p.stderr
    assert results == [(r[1], r[2]) for r in truth[0:1] + truth[2:3]]
    assert not marker.exists()


def test_another_user_cannot_write_into_a_private_cache(users, shared):
    alice, bob = users
    top, homes = shared
    cache = top / "alice-private"
    env = user_env(homes["memsym-alice"], MEMSYM_CACHE_DIR=cache)
    p = subprocess.run([*as_user(alice), sys.executable, "-m", "memsym", "fit", "--hbm", "80GiB"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == ""
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and cache.stat().st_uid == alice.pw_uid
    files = [f for f in cache.rglob("*") if f.is_file()]
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    attempt = subprocess.run([*as_user(bob), sys.executable, "-c",
                              f"open({str(cache / 'terms' / 'x.entry')!r}, 'wb').write(b'x')"],
                             env=user_env(homes["memsym-bob"]), capture_output=True, text=True, timeout=60)
    assert attempt.returncode != 0 and "Permission denied" in attempt.stderr
