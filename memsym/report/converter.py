"""Notebooks to HTML in helper processes while the report is computed (``--format html`` without ``ipynb``).

nbconvert's import and conversions are pure Python and were most of a report's time.  A
:class:`Converter` forks one helper at once, which loads nbconvert and warms it up (its regular
expressions, lexers and sanitiser compile on a first conversion) while this process computes the
sections; the helper then forks a second one from itself (nbconvert already loaded: nothing is
imported twice), and both take the notebooks from one queue as each section is computed.  Each
notebook's HTML is :func:`memsym.report.nbhtml.to_html` of it, byte for byte.  A helper that ends
or hangs is noticed (:meth:`Converter.wait`) and the caller converts that notebook itself; a helper
whose parent is gone stops within a second.
"""
from __future__ import annotations

import os
import queue
import signal
import sys
import time
from typing import Dict, Optional

from . import nbhtml as nbm

#: Helper processes converting at once (the second forked from the first once nbconvert is loaded).
WORKERS = 2
#: Seconds between checks that a helper's parent is still there.
POLL = 1.0


def _warm() -> None:
    """Convert a small notebook once (discarded): what nbconvert compiles on its first use
    (pygments' lexer, mistune, bleach, soupsieve's selectors) is compiled before the real ones."""
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
    nbm.to_html(nb, "warm")


def _serve(tasks, results, parent: int, extra: int) -> None:
    """A helper: load and warm nbconvert, fork ``extra`` more helpers, convert until told to stop."""
    try:
        nbm.html_exporter()
        _warm()
    except Exception:  # never fail here: a conversion that fails shows in the caller, who converts it
        pass
    children = []
    for _ in range(extra):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:  # the second helper: the same loop, its parent this helper
            try:
                _loop(tasks, results, os.getppid())
            finally:
                os._exit(0)
        children.append(pid)

    def stop(signum, frame):  # terminated (the caller failed): take the forked helpers along
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(1)
    signal.signal(signal.SIGTERM, stop)
    try:
        _loop(tasks, results, parent)
    finally:
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


def _loop(tasks, results, parent: int) -> None:
    """Convert (name, notebook text) items from ``tasks`` into ``results`` until None or the parent is gone."""
    try:
        while True:
            try:
                item = tasks.get(timeout=POLL)
            except queue.Empty:
                if os.getppid() != parent:
                    return
                continue
            if item is None:
                return
            name, text = item
            try:
                html = nbm.html_of_text(text, name)
            except Exception:
                html = None  # converted by the caller
            results.put((name, html))
    finally:
        results.close()
        results.join_thread()  # everything put is written before this process ends


class _Pending:
    def __init__(self, converter: "Converter", name: str):
        self.converter, self.name = converter, name

    def get(self, timeout: Optional[float] = None) -> str:
        return self.converter.wait(self.name, timeout)


#: Off: ``memsym report`` converts the notebooks in its own process.  The helpers can outlive a report
#: killed with SIGTERM, or one whose first helper was killed after its 5 s close (a queue's feeder thread
#: blocked on a full pipe or on a lock a killed process held), and a helper that dies stalls the report
#: until every notebook's timeout runs out instead of falling back (found by an adversarial review).
#: Until those are fixed (a parent-death signal in both helpers, one pipe per helper with a poll that
#: sees a dead peer) nothing starts them.
ENABLED = False


class Converter:
    """Helper processes converting notebooks to HTML (see the module); ``None`` from :meth:`start`
    where processes cannot be forked or there is one core; :meth:`close` ends them."""

    def __init__(self):
        # lazy: modules this module's importers do not need (loaded only on this path)
        import multiprocessing
        mp = multiprocessing.get_context("fork")
        self.tasks, self.results = mp.Queue(), mp.Queue()
        self.done: Dict[str, Optional[str]] = {}
        self.closed = False
        self.process = mp.Process(target=_serve, args=(self.tasks, self.results, os.getpid(), WORKERS - 1),
                                  name="memsym-html", daemon=True)
        self.process.start()

    @classmethod
    def start(cls) -> Optional["Converter"]:
        if not ENABLED:
            return None
        if (os.cpu_count() or 1) < 2 or not sys.platform.startswith("linux"):  # fork is safe on Linux
            return None
        try:
            return cls()
        except OSError:
            return None

    def submit(self, nb, name: str) -> _Pending:
        """A pending HTML: ``.get(timeout)`` gives :func:`~memsym.report.nbhtml.to_html` of ``nb``."""
        self.tasks.put((name, nbm.to_ipynb(nb)))
        return _Pending(self, name)

    def wait(self, name: str, timeout: Optional[float] = None) -> str:
        """The HTML of the notebook submitted as ``name``; RuntimeError when its conversion failed or
        the helper ended, TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while name not in self.done:
            left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"no HTML of {name} from the helper process")
            try:
                got, html = self.results.get(timeout=left)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError("the helper process ended") from None
                continue
            self.done[got] = html
        html = self.done[name]
        if html is None:
            raise RuntimeError(f"the helper process failed to convert {name}")
        return html

    def close(self, failed: bool = False) -> None:
        """End the helpers: at once (``failed``), or once they have converted what was submitted.
        Closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        if failed or not self.process.is_alive():
            self.process.terminate()
        else:
            for _ in range(WORKERS):
                self.tasks.put(None)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.tasks.close()
        self.results.close()
