"""A Megatron-LM launch read as data, never run (:func:`read_launch`); mapped onto memsym's options by
:mod:`derivations.config.megatron`.

* A **shell script** calling ``pretrain_gpt.py`` (through ``torchrun``, ``python`` or ``python -m
  torch.distributed.run``): statements split at newlines and ``;`` outside quotes, each into words by :mod:`shlex`;
  assignments and arrays remembered in file order and ``$X``, ``${X:-4}``, ``${X:=4}``, ``"${ARGS[@]}"`` expanded
  from them (no environment read, no command substitution run; an unset variable is an error only where a flag
  that matters reads it).  The torchrun words give the world size.
* A **model_config.yaml** (Megatron-LM tests/functional_tests/test_cases): ``MODEL_ARGS`` maps ``--flag`` to its
  value (``true``: given; ``false``: not), ``ENV_VARS`` kept; read with PyYAML's safe loader, aliases refused."""
from __future__ import annotations

import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from symbolic.errors import ConfigError

from derivations.config.limits import CONFIG_BYTES

#: A variable the file does not set, kept in a value as ``\\0NAME\\0`` until that value is read.
_UNSET = "\0"
_VAR = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*|[0-9#?@*$!-]))")
_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>\+?=)(?P<value>.*)$", re.S)
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-=])(?P<default>.*))?$", re.S)
_ARRAY = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>\+?=)\((?P<inner>.*)\)$", re.S)
#: The characters of shlex's words that end a command (a pipe, a list, a redirection)
_CONTROL = set("|&;<>")
_FD = re.compile(r"(?<=\s)[0-9]+(?=[<>])")  # the descriptor of a redirection (2>&1), dropped before splitting
_ARRAY_ALL = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\[[@*]\]$")
#: Words that start a shell statement which is not a command whose flags are read (skipped).
_KEYWORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
             "{", "}", "!", "[[", "]]", "[", "test", "echo", "printf", "set", "unset", "source", ".", "cd",
             "mkdir", "exit", "return", "shift", "trap", "wait"}
#: Words that precede an assignment (``export X=4``).
_DECLARE = {"export", "local", "declare", "readonly", "typeset"}
#: Launchers whose own options come before the training script (torchrun and torch.distributed's modules).
_LAUNCHERS = {"torchrun", "torch.distributed.run", "torch.distributed.launch"}


@dataclass(frozen=True)
class Launch:
    """A launch file's Megatron ``flags`` in order (flag -> its words), the launcher's ``world`` size (or None) and
    where it came from, the ``env`` the file sets and the launcher's GPUs per node (``per_node``, or None)."""

    path: str
    flags: Dict[str, Tuple[str, ...]]
    world: Optional[int] = None
    world_from: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    per_node: Optional[int] = None
    lists: frozenset = frozenset()  # the flags a model_config.yaml gives a list

    def value(self, flag: str) -> Optional[str]:
        """The single value of ``flag`` (None when absent); an unresolved variable, a switch or a list is refused."""
        if flag not in self.flags:
            return None
        words = self.flags[flag]
        if len(words) != 1 or flag in self.lists:
            got = f"a list [{', '.join(map(shown, words))}]" if flag in self.lists else \
                f"{len(words)} ({' '.join(map(shown, words)) or 'none'})"
            raise self.err(f"{flag} takes one value, got {got}")
        return self.resolved(flag, words[0])

    def words(self, flag: str) -> Tuple[str, ...]:
        return tuple(self.resolved(flag, w) for w in self.flags.get(flag, ()))

    def resolved(self, flag: str, word: str) -> str:
        if _UNSET in word:
            name = word.split(_UNSET)[1]
            raise self.err(f"{flag} reads the variable {name}, which the file does not set (memsym runs nothing "
                           f"and reads no environment): set it in the file or type the memsym option")
        return word

    def err(self, message: str) -> ConfigError:
        return _err(self.path, message)


def _err(path: str, message: str, option: str = "from-megatron") -> ConfigError:
    return ConfigError(option, f"{path}: {message}")


def shown(word: str) -> str:
    """A word as the file wrote it, an unresolved variable as ``$NAME``."""
    return re.sub(f"{_UNSET}([^{_UNSET}]*){_UNSET}", r"$\1", word)


def read_text(path: str, option: str = "from-megatron", what: str = "a launch script or a model_config.yaml") -> str:
    """The text of a launch file: a regular file of at most CONFIG_BYTES bytes of UTF-8, else a ConfigError."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise _err(path, f"not a regular file ({what})", option)
        if st.st_size > CONFIG_BYTES:
            raise _err(path, f"{st.st_size} bytes; a launch file has at most {CONFIG_BYTES}", option)
        # non-blocking, and checked again once open: a file swapped for a FIFO since the stat never blocks the read
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _err(path, f"not a regular file ({what})", option)
            raw = fh.read(CONFIG_BYTES + 1)
        if len(raw) > CONFIG_BYTES:
            raise _err(path, f"more than {CONFIG_BYTES} bytes; a launch file has at most {CONFIG_BYTES}", option)
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _err(path, f"not UTF-8 text (byte {exc.start})", option) from None
    except OSError as exc:
        raise _err(path, f"cannot read the launch file: {exc.strerror or exc}", option) from None


def read_launch(path: str) -> Launch:
    """The Megatron arguments of ``path``: a model_config.yaml (or text with ``MODEL_ARGS:``) or a script."""
    text = read_text(str(path))
    if str(path).endswith((".yaml", ".yml")) or re.search(r"(?m)^MODEL_ARGS\s*:", text):
        return _from_yaml(str(path), text)
    return _from_shell(str(path), text)


# ------------------------------------------------------------------------------------------- YAML
def _from_yaml(path: str, text: str) -> Launch:
    # lazy: PyYAML only for this form of launch file
    import yaml

    class _Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # no anchors or aliases: a test config has none
            if self.check_event(yaml.AliasEvent):
                raise _err(path, "YAML aliases (*name) are not read")
            return super().compose_node(parent, index)

    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise _err(path, "nested too deeply to be a model_config.yaml") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise _err(path, f"not a model_config.yaml: {str(exc).split(';')[0]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise _err(path, f"not a YAML file{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("MODEL_ARGS"), dict):
        raise _err(path, "a model_config.yaml maps MODEL_ARGS to the --flag: value pairs of the run; none found")
    stack = [data]  # an integer PyYAML read whole from hex, binary or base 60 (no digit limit): bounded here
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(list(x.keys()) + list(x.values()))
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 128:
            raise _err(path, f"an integer of {x.bit_length():,} bits: a model_config.yaml's values are short")
    flags: Dict[str, Tuple[str, ...]] = {}
    for key, val in data["MODEL_ARGS"].items():
        if not isinstance(key, str) or not key.startswith("--"):
            raise _err(path, f"MODEL_ARGS key {key!r} is not a --flag")
        if val is False or val is None:
            continue  # the harness passes a false switch as nothing
        if val is True:
            flags[key] = ()
        elif isinstance(val, list):
            flags[key] = tuple(_yaml_word(v) for v in val)
        elif isinstance(val, (str, int, float)):
            flags[key] = (_yaml_word(val),)
        else:
            raise _err(path, f"MODEL_ARGS {key}: a value must be text, a number, true/false or a list, got {val!r}")
    env = data.get("ENV_VARS") or {}
    if not isinstance(env, dict):
        raise _err(path, "ENV_VARS must map names to values")
    return Launch(path, flags, env={str(k): str(v) for k, v in env.items()},
                  lists=frozenset(k for k, v in data["MODEL_ARGS"].items() if isinstance(v, list)))


def _yaml_word(val) -> str:
    text = str(val)
    # ${NAME} in a test config is filled by the harness from its own environment: unresolved here
    return _VAR.sub(lambda m: f"{_UNSET}{m.group('braced') or m.group('plain')}{_UNSET}", text)


# ------------------------------------------------------------------------------------------- shell
def _statements(text: str, path: str) -> List[str]:
    """A shell script's statements, unexpanded: continuations joined, comments dropped."""
    out, cur, quote, depth, i, n = [], [], None, 0, 0, len(text)
    while i < n:
        c = text[i]
        if quote == "'":
            cur.append(c)
            quote = None if c == "'" else quote
        elif c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                cur.append(" ")  # a continuation
            else:
                cur.append(text[i:i + 2])
            i += 2
            continue
        elif quote == '"':
            cur.append(c)
            quote = None if c == '"' else quote
        elif c in "'\"":
            cur.append(c)
            quote = c
        elif c == "#" and (not cur or cur[-1] in " \t\n(;"):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == "(" and cur and cur[-1] == "=":
            depth += 1
            cur.append(c)
        elif c == ")" and depth:
            depth -= 1
            cur.append(c)
        elif c in "\n;" and not depth:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c if c != "\n" else " ")
        i += 1
    if quote or depth:
        raise _err(path, f"unterminated {'quote ' + quote if quote else 'array ('} at the end of the file")
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


#: the longest statement a script's variables may expand to (variables doubled line by line grow as 2^n)
MAX_EXPANDED = 1 << 16
#: the most a whole script may expand to (a long value read on many short lines costs lines x value)
MAX_FILE_EXPANDED = 1 << 18


class _Shell:
    """The variables of a script as it is read, statement by statement (nothing is run)."""

    def __init__(self, path: str):
        self.path, self.vars, self.arrays, self.expanded = path, {}, {}, 0

    def err(self, message: str) -> ConfigError:
        return _err(self.path, message)

    def expand(self, text: str) -> str:
        """``text`` with its variables expanded, for shlex to split: inside single quotes nothing, inside double
        quotes a value stays one word, outside it splits as the shell would; an array's ``[@]`` gives its words."""
        out, quote, i = [], None, 0
        while i < len(text):
            c = text[i]
            if quote == "'":
                out.append(c)
                quote = None if c == "'" else quote
            elif c == "\\" and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            elif c == "'" and quote is None:
                out.append(c)
                quote = "'"
            elif c == '"':
                quote = None if quote == '"' else '"'
                out.append(c)
            elif c == "`" or text.startswith("$(", i):
                raise self.err(f"command substitution {shown(text[i:i + 24])!r}... is not run: write the value")
            elif c == "$":
                m = _VAR.match(text, i)
                if m is None:
                    out.append(c)
                else:
                    out.append(self._value(m, quote == '"'))
                    i = m.end()
                    continue
            else:
                out.append(c)
            i += 1
            if len(out) > MAX_EXPANDED:  # (each piece is bounded: the check below)
                raise self._too_long()
        got = "".join(out)
        if len(got) > MAX_EXPANDED:
            raise self._too_long()
        self.expanded += len(got)
        if self.expanded > MAX_FILE_EXPANDED:
            raise self.err(f"its statements expand to more than {MAX_FILE_EXPANDED:,} characters in all (a long "
                           f"variable read on many lines?): a launch file's values are short")
        return got

    def _too_long(self) -> ConfigError:
        return self.err(f"a statement expands to more than {MAX_EXPANDED:,} characters (variables doubled on "
                        f"themselves?): a launch file's values are short")

    def _value(self, m, quoted: bool) -> str:
        braced, plain = m.group("braced"), m.group("plain")
        if braced is not None:
            arr = _ARRAY_ALL.match(braced)
            if arr:
                words = self.arrays.get(arr.group("name"))
                if words is None:
                    return _UNSET + arr.group("name") + _UNSET
                joined = " ".join(shlex.quote(w) for w in words)
                return f'"{joined}"' if quoted else joined  # closes and reopens the quotes around the words
            b = _BRACED.match(braced)
            if b is None:
                raise self.err(f"${{{braced}}}: only ${{NAME}}, ${{NAME:-default}} and ${{NAME[@]}} are read")
            name, op, default = b.group("name"), b.group("op"), b.group("default")
        else:
            name, op, default = plain, None, None
        val = self.vars.get(name)
        if val is None and name in self.arrays:
            val = self.arrays[name][0] if self.arrays[name] else ""
        if op is not None and (val is None or (op.startswith(":") and val == "")):
            val = self.expand(default)
            if op.endswith("="):
                self.vars[name] = val
        if val is None:
            return _UNSET + name + _UNSET
        return val.replace("\\", "\\\\").replace('"', '\\"') if quoted else val

    def words(self, text: str) -> List[str]:
        expanded = _FD.sub("", self.expand(text))  # (its own errors name the file once)
        try:
            lex = shlex.shlex(expanded, posix=True, punctuation_chars="|&;<>")
            lex.whitespace_split, lex.commenters = True, ""
            return list(lex)
        except ValueError as exc:
            raise self.err(f"cannot split {shown(text[:60])!r}: {exc}") from None


def _from_shell(path: str, text: str) -> Launch:
    sh = _Shell(path)
    for stmt in _statements(text.replace("\r\n", "\n"), path):
        head = stmt.split(None, 1)
        if head[0] in _DECLARE and len(head) > 1:
            stmt, head = head[1], head[1].split(None, 1)
        array = _ARRAY.match(stmt)
        if array:  # NAME=(words) or NAME+=(words)
            name, words = array.group("name"), sh.words(array.group("inner"))
            sh.arrays[name] = (sh.arrays.get(name, []) if array.group("op") == "+=" else []) + words
            continue
        if head[0] in _KEYWORDS:
            continue
        words = sh.words(stmt)
        words = words[:next((i for i, w in enumerate(words) if w and set(w) <= _CONTROL), len(words))]
        while words and _ASSIGN.match(words[0]):  # X=4 alone, or before a command (its environment)
            m = _ASSIGN.match(words.pop(0))
            name, val = m.group("name"), m.group("value")
            sh.vars[name] = (sh.vars.get(name, "") + val) if m.group("op") == "+=" else val
        script = next((i for i, w in enumerate(words) if w.endswith(".py") and not w.startswith("-")), None)
        if script is None:
            continue
        world, per_node, where = _world(sh, words[:script])
        return Launch(path, _flags(sh, words[script + 1:], words[script]), world, where,
                      env={k: v for k, v in sh.vars.items() if _UNSET not in v}, per_node=per_node)
    raise sh.err("no command running a training script (pretrain_gpt.py, torchrun ... pretrain_gpt.py) was found")


def _flags(sh: _Shell, words: List[str], script: str) -> Dict[str, Tuple[str, ...]]:
    """Megatron's ``--flag value...`` words in order; a flag given twice keeps the last, as argparse does."""
    flags: Dict[str, Tuple[str, ...]] = {}
    current = None
    for w in words:
        if w.startswith("--") and len(w) > 2:
            name, eq, val = w.partition("=")
            current = name
            flags.pop(name, None)
            flags[name] = (val,) if eq else ()
        elif current is None and w == "":
            continue  # an empty array expanded in quotes
        elif current is None:
            raise sh.err(f"{shown(w)!r} after {script} is not a --flag: Megatron's arguments are --flag value pairs")
        else:
            flags[current] = flags[current] + (w,)
    return flags


def _world(sh: _Shell, words: List[str]) -> Tuple[Optional[int], Optional[int], str]:
    """(GPUs of a torchrun launch: --nproc-per-node x --nnodes (1 when not given), --nproc-per-node, where they come
    from); Nones without torchrun."""
    if not any(os.path.basename(w) in _LAUNCHERS for w in words):
        return None, None, ""
    opts: Dict[str, str] = {}
    for a, b in zip(words, words[1:] + [""]):
        name, eq, val = a.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node", "--nnodes"):
            opts[name.replace("_", "-")] = val if eq else b
    per, nodes = opts.get("--nproc-per-node"), opts.get("--nnodes", "1")
    if per is None:
        return None, None, ""
    for name, val in (("--nproc-per-node", per), ("--nnodes", nodes)):
        if _UNSET in val:
            raise sh.err(f"torchrun {name} reads the variable {val.split(_UNSET)[1]}, which the file does not set: "
                         f"set it in the file or type --gpus")
        if not re.fullmatch(r"[0-9]{1,6}", val) or int(val) < 1:
            raise sh.err(f"torchrun {name} {shown(val)!r}: memsym reads a positive GPU count (or type --gpus)")
    return int(per) * int(nodes), int(per), f"torchrun --nproc-per-node {per} --nnodes {nodes}"
