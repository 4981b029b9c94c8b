"""Whether a library module's one-line notice waits until its command has finished (set by the
``memsym`` process, memsym/cli.py: a cache warning is printed after a successful run, so an error
stays one line).  Kept apart from symbolic/cache.py so that a command which never touches the cache
does not import it (hmac, pickle, secrets: about 25 ms of a 0.2 s estimate)."""
DEFER = False
