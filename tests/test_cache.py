"""symbolic.cache: this user's folders only, every entry authenticated before it is used, bounded,
and eviction that touches nothing the cache did not write.  The expectations are files on disk
and plain pickles/bytes made here, never values read back through the code under test alone."""
from __future__ import annotations

import os
import pickle
import stat

import pytest

from symbolic import cache, digests


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh cache folder for this test (and a fresh process state: no open folder, no key)."""
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMSYM_CACHE", raising=False)
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    return tmp_path / "cache"


K = "0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def fresh_hashed_roots(monkeypatch):
    """Each test's own set of code roots hashed into keys (digests._HASHED), so one test's edited tree
    does not stop another's stores."""
    monkeypatch.setattr(digests, "_HASHED", set())


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_folders_0700_files_0600_and_a_round_trip(folder):
    assert cache.store("terms", K, b"payload")
    assert cache.load("terms", K) == b"payload"
    assert mode(folder) == 0o700 and mode(folder / "terms") == 0o700
    assert mode(folder / "terms" / f"{K}.entry") == 0o600 and mode(folder / cache.KEY_FILE) == 0o600
    assert len((folder / cache.KEY_FILE).read_bytes()) == cache.KEY_BYTES


def test_nested_kinds(folder):
    assert cache.store("report/forms", K, b"x") and cache.load("report/forms", K) == b"x"
    assert cache.load("report", K) is None


@pytest.mark.parametrize("edit", [
    lambda b: b.replace(b"payload-6", b"payload-7"),     # one digit of the value
    lambda b: b[:-1],                                    # cut short
    lambda b: b + b"x",                                  # grown
    lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],      # one bit of the MAC
    lambda b: pickle.dumps("planted"),                   # replaced by a pickle
])
def test_a_tampered_entry_is_deleted(folder, edit):
    cache.store("terms", K, b"payload-6")
    path = folder / "terms" / f"{K}.entry"
    path.write_bytes(edit(path.read_bytes()))
    assert cache.load("terms", K) is None
    assert not path.exists()


def test_an_entry_moved_under_another_key_or_kind_does_not_verify(folder):
    other = "f" * 32
    cache.store("terms", K, b"A")
    cache.store("terms", other, b"B")
    a, b = folder / "terms" / f"{K}.entry", folder / "terms" / f"{other}.entry"
    data = b.read_bytes()
    a.write_bytes(data)  # B's entry under A's name
    assert cache.load("terms", K) is None
    os.makedirs(folder / "search", exist_ok=True)
    (folder / "search" / f"{other}.entry").write_bytes(data)  # B's entry under another kind
    assert cache.load("search", other) is None
    assert cache.load("terms", other) == b"B"


def test_a_new_key_file_invalidates_every_entry(folder, monkeypatch):
    cache.store("terms", K, b"A")
    (folder / cache.KEY_FILE).write_bytes(os.urandom(cache.KEY_BYTES))
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    assert cache.load("terms", K) is None


@pytest.mark.parametrize("bad", [b"short", pickle.dumps(object) * 3, b"", None])
def test_a_key_file_memsym_did_not_make_is_never_replaced(folder, bad, monkeypatch, capsys):
    """A file where the key belongs that is not a private 32-byte file (a user's file named so, a folder)
    is left alone: the cache is not used, and the warning says how to let memsym make its key."""
    cache.store("terms", K, b"A")
    key = folder / cache.KEY_FILE
    key.unlink()
    if bad is None:
        key.mkdir()
    else:
        key.write_bytes(bad)
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    assert cache.load("terms", K) is None and not cache.store("terms", K, b"B")
    assert (key.is_dir() if bad is None else key.read_bytes() == bad)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "delete it" in err


def test_a_readable_key_file_is_not_used(folder, monkeypatch, capsys):
    cache.store("terms", K, b"A")
    os.chmod(folder / cache.KEY_FILE, 0o644)
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    assert cache.load("terms", K) is None and mode(folder / cache.KEY_FILE) == 0o644
    assert "not memsym's private key" in capsys.readouterr().err


def test_a_users_file_named_key_is_untouched(tmp_path, monkeypatch):
    """MEMSYM_CACHE_DIR pointing at a project folder: memsym's key has a name of its own."""
    proj = tmp_path / "proj"
    proj.mkdir(mode=0o700)
    (proj / "key").write_text("secret")
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(proj))
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    assert cache.store("terms", K, b"A") and cache.load("terms", K) == b"A"
    assert (proj / "key").read_text() == "secret"


@pytest.mark.parametrize("perm", [0o777, 0o775, 0o757, 0o1777])
def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch, capsys, perm):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, perm)
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(shared))
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    assert not cache.store("terms", K, b"A") and cache.load("terms", K) is None
    assert cache.pickled("terms", ("x",), lambda: 42) == 42
    assert list(shared.iterdir()) == []  # nothing written there, not even the key
    err = capsys.readouterr().err
    assert err.count("memsym: cache not used") == 1 and "writable by" in err and err.count("\n") == 1


def test_a_subfolder_others_can_write_or_a_link_is_not_used(folder, tmp_path, capsys):
    cache.store("terms", K, b"A")
    os.chmod(folder / "terms", 0o777)
    assert cache.load("terms", K) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, folder / "search")
    assert not cache.store("search", K, b"B") and cache.load("search", K) is None
    assert list(elsewhere.iterdir()) == []
    assert capsys.readouterr().err.count("memsym: cache not used") == 1


def test_a_link_in_place_of_an_entry_is_never_followed(folder, tmp_path):
    cache.store("terms", K, b"A")
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    entry = folder / "terms" / f"{K}.entry"
    entry.unlink()
    os.symlink(target, entry)
    assert cache.load("terms", K) is None
    assert target.read_bytes() == b"precious"
    assert cache.store("terms", K, b"A") and not entry.is_symlink() and target.read_bytes() == b"precious"


def test_a_fifo_in_place_of_an_entry_does_not_block(folder):
    cache.store("terms", K, b"A")
    entry = folder / "terms" / f"{K}.entry"
    entry.unlink()
    os.mkfifo(entry)
    assert cache.load("terms", K) is None


def test_eviction_keeps_the_newest_and_never_touches_other_files(folder, monkeypatch):
    monkeypatch.setitem(cache.LIMITS, "output", (3, 1 << 20))
    os.makedirs(folder / "output", mode=0o700)
    foreign = [folder / "output" / f"user{i}.json" for i in range(20)]
    for p in foreign:
        p.write_text("{}")
    lookalike = folder / "output" / ("a" * 32 + ".json")
    lookalike.write_text("{}")
    keys = [f"{i:032x}" for i in range(6)]
    for i, k in enumerate(keys):
        cache.store("output", k, b"x")
        os.utime(folder / "output" / f"{k}.entry", ns=((i + 1) * 10 ** 9,) * 2)
    cache.store("output", "e" * 32, b"newest")
    left = sorted(p.name for p in (folder / "output").glob("*.entry"))
    assert len(left) == 3 and f"{'e' * 32}.entry" in left and f"{keys[5]}.entry" in left
    assert all(p.exists() for p in foreign) and lookalike.exists()


def test_eviction_bounds_bytes(folder, monkeypatch):
    monkeypatch.setitem(cache.LIMITS, "terms", (100, 3000))
    for i in range(10):
        cache.store("terms", f"{i:032x}", os.urandom(1000))
    total = sum(p.stat().st_size for p in (folder / "terms").glob("*.entry"))
    assert total <= 3000 and len(list((folder / "terms").glob("*.entry"))) >= 1


def test_eviction_through_a_linked_folder_is_refused(tmp_path, monkeypatch):
    """``output`` a link to a folder of the user's files: nothing there is read, written or deleted."""
    base = tmp_path / "cache"
    base.mkdir(mode=0o700)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    files = [mine / f"{i:032x}.entry" for i in range(300)]
    for p in files:
        p.write_text("{}")
    os.symlink(mine, base / "output")
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(base))
    monkeypatch.setattr(cache, "_state", {"base": None, "fd": None, "key": None, "warned": False, "pending": None})
    for i in range(5):
        cache.store("output", f"{1000 + i:032x}", b"x")
    assert all(p.exists() for p in files) and len(list(mine.iterdir())) == 300


def test_pickled_unpickles_only_what_verifies(folder, tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))
    assert cache.pickled("terms", ("k",), lambda: {"value": 1}) == {"value": 1}
    (entry,) = (folder / "terms").glob("*.entry")
    data = entry.read_bytes()
    head = len(cache.MAGIC) + 32
    meta_end = data.index(b"\0", data.index(b"\0", head) + 1) + 1
    entry.write_bytes(data[:meta_end] + pickle.dumps(Payload()))  # a valid header, the MAC now wrong
    assert cache.pickled("terms", ("k",), lambda: {"value": 2}) == {"value": 2}
    assert not marker.exists()


def test_a_key_part_that_is_none_is_not_cached(folder):
    calls = []
    for _ in range(2):
        cache.pickled("terms", ("k", None), lambda: calls.append(1) or 7)
    assert calls == [1, 1] and not (folder / "terms").exists()


def test_code_changed_after_the_process_started_gives_no_key(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    os.utime(tree / "a.py", ns=(10 ** 18, 10 ** 18))  # before this process started
    assert digests.tree_digest(tree) is not None and not digests.changed_since_start(tree)
    (tree / "a.py").write_text("x = 2\n")             # now: the code running may be the old one
    assert digests.tree_digest(tree) is None and digests.changed_since_start(tree)


@pytest.mark.parametrize("off", ["0", "off", "OFF", "False", " no "])
def test_cache_off(folder, monkeypatch, off):
    monkeypatch.setenv("MEMSYM_CACHE", off)
    assert not cache.store("terms", K, b"A") and cache.load("terms", K) is None and not folder.exists()



def test_nothing_is_stored_once_hashed_code_changed(folder, tmp_path):
    """A key made from code that then changes under the process describes neither version: store refuses."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    os.utime(tree / "a.py", ns=(10 ** 18, 10 ** 18))
    assert digests.tree_digest(tree) is not None and cache.store("terms", K, b"A")
    (tree / "a.py").write_text("x = 2\n")
    assert not cache.store("terms", "f" * 32, b"B") and cache.load("terms", "f" * 32) is None


def test_an_entrys_folder_goes_with_it(folder, monkeypatch):
    """A numba kernel's folder (kernels/<key>/, symbolic.compiled) is evicted with its manifest entry;
    a folder of another name, or one still being built, stays."""
    monkeypatch.setitem(cache.LIMITS, "kernels", (2, 1 << 20))
    os.makedirs(folder / "kernels", mode=0o700)
    keys = [f"{i:032x}" for i in range(4)]
    for i, k in enumerate(keys):
        (folder / "kernels" / k).mkdir(mode=0o700)
        (folder / "kernels" / k / "k.py").write_text("x = 1\n")
        cache.store("kernels", k, b"{}")
        os.utime(folder / "kernels" / f"{k}.entry", ns=((i + 1) * 10 ** 9,) * 2)
    (folder / "kernels" / "mine").mkdir()
    (folder / "kernels" / ("f" * 32)).mkdir()  # no entry yet: a kernel being built
    cache.store("kernels", "e" * 32, b"{}")
    left = {p.name for p in (folder / "kernels").iterdir()}
    assert left == {keys[3], keys[3] + ".entry", "e" * 32 + ".entry", "f" * 32, "mine"}
