"""Notebooks to HTML in helper processes while the report is computed (``--format html`` without ``ipynb``).

nbconvert's import and conversions are pure Python and were most of a report's time.  A
:class:`Converter` forks one helper at once (before this process loads sympy), which loads nbconvert
and warms it up (its regular expressions, lexers and sanitiser compile on a first conversion) while
this process computes the sections; the helper then forks a second one from itself (nbconvert
already loaded: nothing is imported twice).  Each notebook's HTML is
:func:`memsym.report.nbhtml.to_html` of it, byte for byte.

Lifetime (each point has a test in ``tests/test_converter.py``):

- every helper has its own pair of pipes to this process (no queue shared between processes, no
  lock a killed process can hold); a thread here per helper hands it the next notebook when it has
  returned the last one, so the helpers share the work as they free up;
- a helper dies with its parent: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux), so the second helper
  dies with the first and the first with the report, however they end (SIGKILL included); a helper
  also ends when its task pipe closes;
- ``SIGTERM`` to the report kills the helpers before the report ends (then the signal's previous
  disposition applies);
- a helper that dies is seen at once (its result pipe ends): what it held or was still to do is
  converted by the caller (:meth:`Converter.wait` raises), never waited for; a helper that hangs is
  killed at the caller's timeout, once.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import struct
import sys
import threading
import time
from typing import Dict, List, Optional

from . import nbhtml as nbm

#: Helper processes converting at once (the second forked from the first once nbconvert is loaded).
WORKERS = 2
#: Seconds between checks while waiting for a notebook's HTML.
POLL = 0.5
#: Seconds a normal :meth:`Converter.close` waits for the helpers to end before killing them.
CLOSE_WAIT = 5.0

ENABLED = True

_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1


def _warm() -> None:
    """Check and convert a small notebook once (discarded): what nbformat and nbconvert compile on their
    first use (the schema's validator, pygments' lexer, mistune, bleach, soupsieve's selectors) is
    compiled before the real ones, and before the first helper forks the others."""
    from nbformat.notebooknode import from_dict
    nb = from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
                    "cells": [
                        {"id": "w-00", "cell_type": "markdown", "metadata": {},
                         "source": "# T\n\n*a* `b` $x_{1}$\n\n| a | b |\n|:--|--:|\n| 1 | 2 |"},
                        {"id": "w-01", "cell_type": "code", "metadata": {}, "execution_count": 1,
                         "source": "S.table(\"x\")  # c",
                         "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                      "data": {"text/plain": "T()", "text/markdown": "**t**\n\n$$x$$"}},
                                     {"output_type": "display_data", "metadata": {},
                                      "data": {"text/plain": "x", "text/latex": "$\\displaystyle x$"}}]}]})
    nbm.to_html(nbm.checked(nb), "warm", checked=True)


# ----------------------------------------------------------------------------- framing on the pipes
def _write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe was closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> bytes:
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return _read_exact(fd, n)


def _send(fd: int, obj) -> None:
    _write_frame(fd, json.dumps(obj).encode("utf-8"))


def _receive(fd: int):
    return json.loads(_read_frame(fd).decode("utf-8"))


# ----------------------------------------------------------------------------- the helpers' side
def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent ends (Linux prctl); end now if the parent already has."""
    # lazy: ctypes, in the helper only (the report's process never needs it)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(1)
    if os.getppid() != parent:  # the parent ended before prctl: no signal will come
        os._exit(0)


def _child_start(parent: int, keep: List[int], close: List[int]) -> None:
    """In a freshly forked helper: die with ``parent``, leave Ctrl-C to the report, close the pipe
    ends that are not this helper's (else a pipe would not end when its other side does)."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the report handles Ctrl-C and ends the helpers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in close:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _loop(task_fd: int, result_fd: int) -> None:
    """Say hello (this pid), then convert ``[name, notebook json]`` items until the task pipe ends."""
    _send(result_fd, {"pid": os.getpid()})
    while True:
        try:
            name, text = _receive(task_fd)
        except (EOFError, OSError):
            return
        try:
            html = nbm.html_of_json(text, name)
        except Exception:
            html = None  # converted by the caller
        _send(result_fd, {"name": name, "html": html})


def _first_helper(pipes: List[List[int]], parent: int) -> None:
    """The first helper (pipes[0] its own, pipes[1:] the later helpers'): load and warm nbconvert,
    fork the others, convert until its task pipe ends, wait for the helpers it forked."""
    own = pipes[0]
    _child_start(parent, keep=[own[0], own[3]] + [fd for p in pipes[1:] for fd in (p[0], p[3])],
                 close=[fd for p in pipes for fd in p])
    try:
        if not nbm.fast():
            nbm.html_exporter()  # nbconvert, unless nbfast makes its HTML
        _warm()
    except Exception:  # never fail here: a conversion that fails shows in the caller, who converts it
        pass
    children = []
    me = os.getpid()
    for i, p in enumerate(pipes[1:], start=1):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                _child_start(me, keep=[p[0], p[3]], close=[fd for q in pipes for fd in (q[0], q[3])])
                _loop(p[0], p[3])
            finally:
                os._exit(0)
        children.append(pid)
    for p in pipes[1:]:  # the later helpers' ends are theirs now (or nobody's: the report sees the pipe end)
        for fd in (p[0], p[3]):
            try:
                os.close(fd)
            except OSError:
                pass
    try:
        _loop(own[0], own[3])
    finally:
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


# ----------------------------------------------------------------------------- the report's side
class _Helper:
    def __init__(self, task_fd: int, result_fd: int):
        self.task_fd, self.result_fd = task_fd, result_fd
        self.pid: Optional[int] = None
        self.alive = True
        self.current: Optional[str] = None
        self.thread: Optional[threading.Thread] = None


class _Pending:
    def __init__(self, converter: "Converter", name: str):
        self.converter, self.name = converter, name

    def get(self, timeout: Optional[float] = None) -> str:
        return self.converter.wait(self.name, timeout)


class Converter:
    """Helper processes converting notebooks to HTML (see the module); ``None`` from :meth:`start`
    where processes cannot be forked or there is one core; :meth:`close` ends them."""

    def __init__(self):
        pipes = []
        try:
            for _ in range(WORKERS):
                task_r, task_w = os.pipe()
                result_r, result_w = os.pipe()
                pipes.append([task_r, task_w, result_r, result_w])
        except OSError:
            for p in pipes:
                for fd in p:
                    os.close(fd)
            raise
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the first helper: never returns (os._exit: no exit handler or buffer of this process)
            code = 0
            try:
                _first_helper(pipes, parent)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        self.pid = pid
        for p in pipes:  # the helpers' ends
            os.close(p[0])
            os.close(p[3])
        self.helpers = [_Helper(p[1], p[2]) for p in pipes]
        self.tasks: "queue.Queue" = queue.Queue()
        self.done: Dict[str, Optional[str]] = {}
        self.cond = threading.Condition()
        self.closed = False
        self._sigterm = None
        for h in self.helpers:
            h.thread = threading.Thread(target=self._pump, args=(h,), name="memsym-html", daemon=True)
            h.thread.start()
        self._handle_sigterm()

    @classmethod
    def start(cls) -> Optional["Converter"]:
        if not ENABLED:
            return None
        if (os.cpu_count() or 1) < 2 or not sys.platform.startswith("linux"):  # fork and prctl: Linux
            return None
        try:
            return cls()
        except OSError:
            return None

    # -- the threads handing notebooks to the helpers
    def _pump(self, h: _Helper) -> None:
        try:
            h.pid = int(_receive(h.result_fd)["pid"])
            while True:
                item = self.tasks.get()
                if item is None:
                    return
                name, text = item
                with self.cond:
                    h.current = name
                _send(h.task_fd, [name, text])
                got = _receive(h.result_fd)
                with self.cond:
                    self.done[got["name"]] = got["html"]
                    h.current = None
                    self.cond.notify_all()
        except (EOFError, OSError, ValueError, KeyError, TypeError):
            pass
        finally:
            with self.cond:
                h.alive = False
                if h.current is not None:
                    self.done.setdefault(h.current, None)  # the caller converts it
                    h.current = None
                self.cond.notify_all()
            for fd in (h.task_fd, h.result_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def submit(self, nb, name: str) -> _Pending:
        """A pending HTML: ``.get(timeout)`` gives :func:`~memsym.report.nbhtml.to_html` of ``nb``."""
        self.tasks.put((name, nbm.to_json(nb)))
        return _Pending(self, name)

    def wait(self, name: str, timeout: Optional[float] = None) -> str:
        """The HTML of the notebook submitted as ``name``; RuntimeError when its conversion failed or
        no helper is left to convert it, TimeoutError after ``timeout`` seconds (the helper
        holding it is then killed: the next notebooks do not wait for it again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while name not in self.done:
                if not any(h.alive for h in self.helpers):
                    raise RuntimeError("the helper processes ended")
                left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
                if left <= 0:
                    for h in self.helpers:
                        if h.current == name:
                            self._kill(h)
                    raise TimeoutError(f"no HTML of {name} from the helper process")
                self.cond.wait(left)
            html = self.done[name]
        if html is None:
            raise RuntimeError(f"the helper process failed to convert {name}")
        return html

    # -- ending
    def pids(self) -> List[int]:
        """The helpers' process ids known so far (the first's at once, the second's once it said hello)."""
        return [self.pid] + [h.pid for h in self.helpers[1:] if h.pid is not None]

    def _kill(self, h: Optional[_Helper] = None) -> None:
        for pid in ([h.pid] if h is not None else self.pids()):
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _handle_sigterm(self) -> None:
        """Kill the helpers when the report is sent SIGTERM, then let the signal do what it did before."""
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers are the main thread's (the helpers still die with this process)

        def on_sigterm(signum, frame):
            self._kill()
            previous = self._restore_sigterm()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os.kill(os.getpid(), signal.SIGTERM)  # the default (restored): end, as SIGTERM ends a process
        try:
            previous = signal.signal(signal.SIGTERM, on_sigterm)
        except (ValueError, OSError):
            return
        self._sigterm = (previous if previous is not None else signal.SIG_DFL,)

    def _restore_sigterm(self):
        """Put back the SIGTERM disposition found at start (once); returns it, or None if none was replaced."""
        if self._sigterm is None:
            return None
        (previous,), self._sigterm = self._sigterm, None
        try:
            signal.signal(signal.SIGTERM, previous)
        except (ValueError, OSError):
            pass
        return previous

    def close(self, failed: bool = False) -> None:
        """End the helpers: at once (``failed``), or once they have converted what was submitted.
        Closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        if failed:
            self._kill()
        for _ in self.helpers:
            self.tasks.put(None)  # a thread waiting for work closes its helper's task pipe: the helper ends
        end, ended = time.monotonic() + CLOSE_WAIT, False
        while not ended and time.monotonic() < end:
            try:
                ended = os.waitpid(self.pid, os.WNOHANG)[0] != 0
            except ChildProcessError:
                ended = True
            if not ended:
                time.sleep(0.01)
        if not ended:  # still there: kill (the second helper dies with it, and on its closed pipe)
            self._kill()
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        for h in self.helpers:
            if h.thread is not None:
                h.thread.join(timeout=1)
        self._restore_sigterm()
