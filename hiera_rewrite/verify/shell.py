"""The simple commands of a shell script, as bash would run them (worker side, stdlib only).

:func:`commands` reads a script the way bash does for what ``--verify`` needs from it --
the words of each command line after expansion -- without running anything:

* quotes: ``'...'`` literal, ``"..."`` with ``$`` expansions and ``\\`` escapes, both may
  span lines (a quoted assignment broken over several lines without a backslash);
  ``\\`` + newline joins lines; ``#`` at a word's start comments out the rest of the line;
* operators (``;``, ``&&``, ``||``, ``|``, ``&``, ``(``, ``)``, a newline) end a command --
  only where they are written in the script: the *value* of a variable never holds
  operators; an unquoted ``$var`` is split into words on whitespace (bash's word
  splitting), nothing else (``common_args="--q_strides 5,1,1;1,3,1"`` then
  ``python main.py $common_args`` passes ``5,1,1;1,3,1`` as one word);
* variables: ``NAME=value`` (also ``export``/``declare``/``local``/``readonly``, and
  arrays ``NAME=(a b)`` with ``"${NAME[@]}"``), ``$NAME``, ``${NAME}``, ``${NAME:-default}``,
  ``${NAME:=default}``; an unknown variable, a positional parameter (``$1``), a command
  substitution (``$(...)``, backquotes) or arithmetic stays in the word as written (a word
  holding ``$`` is one the script computes at run time);
* redirections (``2>&1``, ``> log``) come out as one word starting with ``<`` or ``>``
  (with the descriptor before it); a here-document's body is skipped.

Nothing is executed and no file is read.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Union

Value = Union[str, List[str]]

_NAME = re.compile(r"[A-Za-z_]\w*")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)(\+?)=")
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}
_SPECIAL = set("@*#?$!-0123456789")


class _Lexer:
    def __init__(self, text: str, env: Optional[Dict[str, Value]] = None) -> None:
        self.text = text.replace("\r\n", "\n")
        self.i = 0
        self.env: Dict[str, Value] = dict(env or {})
        self.out: List[List[str]] = []
        self.words: List[str] = []
        self.word: List[str] = []
        self.started = False  # the current word exists (even if empty: "")
        self.heredocs: List[tuple] = []  # (delimiter, strip tabs) pending at the end of the line

    # -- words and commands

    def end_word(self) -> None:
        if self.started:
            word = "".join(self.word)
            self.words.append(word)
            # an assignment of a command that is only assignments so far: in effect at once
            # (A=1 B=$A); a command run with a prefix assignment keeps it too (harmless here)
            if self._assigning(len(self.words) - 1):
                m = _ASSIGN.match(word)
                if m and not isinstance(self.env.get(m.group(1)), list):
                    value = word[m.end():]
                    self.env[m.group(1)] = (str(self.env.get(m.group(1), "")) + value) if m.group(2) else value
        self.word, self.started = [], False

    def end_command(self) -> None:
        self.end_word()
        if self.words:
            self.out.append(self.words)
        self.words = []

    def _assigning(self, upto: Optional[int] = None) -> bool:
        """The words of the current command before ``upto`` are all assignments (or a
        ``declare``-like word and assignments): a word at ``upto`` is in assignment context."""
        words = self.words[:upto] if upto is not None else self.words
        if words and words[0] in _DECLARE:
            words = words[1:]
            if words and words[0].startswith("-") and not _ASSIGN.match(words[0]):
                words = words[1:]
        return all(_ASSIGN.match(w) for w in words)

    def in_assignment(self) -> bool:
        """The word being read is an assignment's value (no word splitting there)."""
        return bool(_ASSIGN.match("".join(self.word))) and self._assigning()

    def add(self, text: str) -> None:
        self.word.append(text)
        self.started = True

    def add_split(self, value: str) -> None:
        """An unquoted expansion's value: split into words on whitespace."""
        if self.in_assignment():
            self.add(value)
            return
        if not value:
            return
        parts = value.split()
        if value[:1].isspace():
            self.end_word()
        for n, part in enumerate(parts):
            self.add(part)
            if n < len(parts) - 1:
                self.end_word()
        if value[-1:].isspace():
            self.end_word()

    # -- reading

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def run(self) -> List[List[str]]:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c == "\\":
                nxt = self.peek(1)
                self.i += 2
                if nxt != "\n":
                    self.add(nxt)
                continue
            if c == "\n":
                self.i += 1
                self.end_command()
                self.skip_heredocs()
                continue
            if c in " \t\r":
                self.i += 1
                self.end_word()
                continue
            if c == "#" and not self.started:
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
                continue
            if c == "'":
                end = text.find("'", self.i + 1)
                end = len(text) if end < 0 else end
                self.add(text[self.i + 1:end])
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                self.double_quoted()
                continue
            if c == "`":
                end = text.find("`", self.i + 1)
                end = len(text) if end < 0 else end
                self.add("$(" + text[self.i + 1:end] + ")")
                self.i = end + 1
                continue
            if c == "$":
                self.dollar(quoted=False)
                continue
            if c in "<>" or (c == "&" and self.peek(1) == ">"):
                self.redirection()
                continue
            if c == "(" and self.in_assignment() and "".join(self.word).endswith("="):
                self.array()
                continue
            if c in ";&|()":
                self.i += 1
                while self.peek() in ";&|" and self.peek():
                    self.i += 1
                self.end_command()
                continue
            self.add(c)
            self.i += 1
        self.end_command()
        return self.out

    def double_quoted(self) -> None:
        """A double-quoted string (from after the opening quote), expanded into the word."""
        text = self.text
        self.started = True
        while self.i < len(text):
            c = text[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                if self.peek(1) != "\n":
                    self.add(self.peek(1))
                self.i += 2
                continue
            if c == "$":
                self.dollar(quoted=True)
                continue
            if c == "`":
                end = text.find("`", self.i + 1)
                end = len(text) if end < 0 else end
                self.add("$(" + text[self.i + 1:end] + ")")
                self.i = end + 1
                continue
            self.add(c)
            self.i += 1

    def matching(self, start: int, open_: str, close: str) -> int:
        """The index after the ``close`` matching the ``open_`` at ``start`` (quotes skipped)."""
        depth, j, text = 0, start, self.text
        while j < len(text):
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                end = text.find(c, j + 1)
                j = len(text) if end < 0 else end + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return len(text)

    def dollar(self, quoted: bool) -> None:
        """Expand the ``$...`` at ``self.i`` into the current word: as it is inside double
        quotes (``quoted``), else split into words on whitespace; what only the running
        script knows (an unknown or positional variable, ``$(...)``) as written."""
        text, i = self.text, self.i
        nxt = self.peek(1)
        if nxt == "(":  # $(...) / $((...))
            end = self.matching(i + 1, "(", ")")
            self.i = end
            self.add(text[i:end])
            return
        if nxt == "{":
            end = self.matching(i + 1, "{", "}")
            self.i = end
            value, values = self.braced(text[i + 2:end - 1], text[i:end])
            if value is None:  # not known: as written
                self.add(text[i:end])
            elif values is not None and not self.in_assignment():  # "${arr[@]}": a word per element
                for n, v in enumerate(values):
                    if n:
                        self.end_word()
                    self.add(v) if quoted else self.add_split(v)
            elif quoted:
                self.add(value)
            else:
                self.add_split(value)
            return
        if nxt == "'" and not quoted:  # $'...': ANSI-C quoting
            end = text.find("'", i + 2)
            end = len(text) if end < 0 else end
            self.i = end + 1
            self.add(text[i + 2:end].replace("\\n", "\n").replace("\\t", "\t"))
            return
        if nxt == '"' and not quoted:  # $"...": a translated string
            self.i = i + 1
            return
        m = _NAME.match(text, i + 1)
        if m:
            self.i = m.end()
            found = self.env.get(m.group(0))
            if found is None:
                self.add("$" + m.group(0))
                return
            value = (found[0] if found else "") if isinstance(found, list) else found
            self.add(value) if quoted else self.add_split(value)
            return
        if nxt and nxt in _SPECIAL:
            self.i = i + 2
            self.add("$" + nxt)
            return
        self.i = i + 1
        self.add("$")

    def braced(self, inner: str, raw: str):
        """(value, words or None) of ``${inner}``; (None, None) for what only the running
        script knows (an unknown variable, ``${#x}``, ``${x/a/b}``...)."""
        m = re.fullmatch(r"([A-Za-z_]\w*)\[([@*])\]", inner)
        if m:
            found = self.env.get(m.group(1))
            if found is None:
                return None, None
            items = found if isinstance(found, list) else [found]
            return " ".join(items), (list(items) if m.group(2) == "@" else None)
        m = re.fullmatch(r"([A-Za-z_]\w*)(?:(:?[-=])(.*))?", inner, re.S)
        if not m:
            return None, None
        name, op, default = m.group(1), m.group(2), m.group(3)
        found = self.env.get(name)
        if isinstance(found, list):
            found = found[0] if found else ""
        if op is None:
            return found, None
        if found is None or (op.startswith(":") and found == ""):
            if "$" in default or "`" in default:
                sub = _Lexer('"' + default.replace('"', '\\"') + '"', self.env)
                words = sub.run()
                default = words[0][0] if words and words[0] else default
            if op.endswith("="):
                self.env[name] = default
            return default, None
        return found, None

    def array(self) -> None:
        """``NAME=(a b c)``: the elements, each word read and expanded as bash does."""
        end = self.matching(self.i, "(", ")")
        name = _ASSIGN.match("".join(self.word)).group(1)
        sub = _Lexer(self.text[self.i + 1:end - 1].replace("\n", " "), self.env)
        sub.run()
        self.env[name] = [w for words in sub.out for w in words]
        self.i = end
        self.word, self.started = [], False

    def redirection(self) -> None:
        """``2>&1``, ``>> log``, ``< in``, ``&> log``, ``<<EOF``: one word starting with
        ``<``/``>``, the descriptor number before it joined to it."""
        text = self.text
        fd = "".join(self.word) if self.started and "".join(self.word).isdigit() else ""
        if fd:
            self.word, self.started = [], False
        else:
            self.end_word()
        j = self.i
        while j < len(text) and text[j] in "<>&|-":
            j += 1
        op = text[self.i:j]
        self.i = j
        if op.startswith("<<") and not op.startswith("<<<"):
            while self.peek() in " \t":
                self.i += 1
            m = re.match(r"""(['"]?)([^\s'";&|<>()]+)\1""", text[self.i:])
            if m:
                self.heredocs.append((m.group(2), op.endswith("-")))
                self.i += m.end()
        self.words.append(fd + op)

    def skip_heredocs(self) -> None:
        while self.heredocs:
            delim, strip = self.heredocs.pop(0)
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i:end]
                self.i = end + 1
                if (line.lstrip("\t") if strip else line) == delim:
                    break


def commands(text: str, env: Optional[Dict[str, Value]] = None) -> List[List[str]]:
    """The words of each simple command of a shell script, in order, expanded as bash
    would (see the module's docstring); a malformed script gives what was read."""
    lexer = _Lexer(text, env)
    try:
        return lexer.run()
    except (IndexError, ValueError, RecursionError):  # an odd script: what was read so far
        lexer.end_command()
        return lexer.out
