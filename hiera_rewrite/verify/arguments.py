"""Constructor arguments for ``--verify``'s builds (worker side).

Values for what a model needs and nobody gave -- a required argument, a key a factory
reads from ``**kwargs``, a key of a configuration object (``cfg.embed_dim``) -- come
from the user's ``--kwargs``, a small value from the name for sizes, the repo's own
values (its shell scripts' ``--name value`` arguments, its JSON/YAML configs, argparse
defaults in its Python scripts; strings of integers as the sequences they stand for), else a small
Hiera-consistent value from the name.  A name (``model_name``) gets each string the repo
and the files' code name for it, smallest model first (:meth:`Building.choices`); a build
that raises tries the next.  :class:`Building` builds a candidate small
(few blocks, small dims, the smallest valid input size) and records how; a
*component* (a class holding a site no model reached) as the files construct it, then
with the branches its defaults switch off switched on.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import math
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .functions import function_call


# constructor arguments that load weights (checkpoints_off)
_CHECKPOINT_WORDS = ("pretrain", "checkpoint", "ckpt", "load_from", "resume", "weights_path", "weight_path")
_SIZE_WORDS = ["nano", "pico", "tiny", "small", "base", "plus", "large", "huge", "giant"]


# configuration that changes sizes, not code paths: not part of a variant
SIZE_KNOBS = {
    "embed_dim", "num_heads", "stages", "depth", "num_classes", "decoder_embed_dim", "decoder_depth",
    "decoder_num_heads", "drop_path_rate", "mlp_ratio", "head_dropout", "head_init_scale",
}


NO_DEFAULT = object()


# the knobs of shrink() that change depth (blocks), not width: "small widths" keeps them
DEPTH_KNOBS = {"stages", "depth", "decoder_depth"}


def is_depth_knob(name: str) -> bool:
    """A knob of shrink() that changes depth: DEPTH_KNOBS and any other blocks-per-stage
    tuple (decoder_stages, depths) or decoder depth."""
    n = name.lower()
    return name in DEPTH_KNOBS or (n.endswith(("stages", "depths", "decoder_depth")) and not n.startswith(("num_", "n_")))


# a component's integer knobs whose 0/1 default switches a branch off (q-pool, windows)
BRANCH_KNOBS = ("stride", "window", "unit", "pool")


class _Opaque:
    """A factory's keyword value that only its code knows (``kwargs["x"]``, a call)."""

    def __repr__(self) -> str:
        return "<computed>"


OPAQUE = _Opaque()


class CallRef:
    """A call in the repo's scripts passed as an argument (``encoder=Hiera(...)``, or a
    name bound to one: ``enc = hiera_tiny_224()``): the callee's name and its arguments
    (literals, other CallRefs, OPAQUE); ``qual``: (module, dotted attribute) the callee is
    imported as in that script (``HieraConfig.from_yaml`` -> ("mylib.config",
    "HieraConfig.from_yaml")), or None."""

    def __init__(self, name: str, args: List[Any], kwargs: Dict[str, Any], qual: Optional[Tuple[str, str]] = None) -> None:
        self.name, self.args, self.kwargs, self.qual = name, args, kwargs, qual

    def __repr__(self) -> str:
        return f"<call {self.name}>"


class ModuleArg:
    """A constructor argument that is itself a model of the files (``encoder=``): the
    candidate that builds it (class or factory, and its configuration), the mode it is
    built in, and once built on the original side, the keyword arguments that rebuild it;
    each side builds it from its own copy of the module."""

    def __init__(self, cand: Dict[str, Any], mode: Optional[Dict[str, Any]] = None) -> None:
        self.cand, self.mode = cand, mode
        self.kwargs: Optional[Dict[str, Any]] = None
        self.size: Optional[List[int]] = None

    def __repr__(self) -> str:
        return f"<{self.cand['module']}:{self.cand['attr']}>"


class ObjectArg:
    """A constructor argument the repo's scripts or tests build with a call of the repo's own
    code (``config=HieraConfig(embed_dim=96, ...)``, ``HieraConfig.from_yaml("configs/x.yaml")``)
    or a configuration loader (``OmegaConf.load(...)``): called again on each side, from that
    side's copy of its module, with the same literal arguments (nested ones built the same
    way; a relative path that exists under the repo root given absolute)."""

    def __init__(self, module: str, attr: str, args: List[Any], kwargs: Dict[str, Any], root: Optional[str] = None) -> None:
        self.module, self.attr, self.args, self.kwargs, self.root = module, attr, list(args), dict(kwargs), root

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ObjectArg) and (self.module, self.attr, self.args, self.kwargs) == (other.module, other.attr, other.args, other.kwargs)

    __hash__ = None  # type: ignore[assignment]

    def with_kwargs(self, **changes: Any) -> "ObjectArg":
        return ObjectArg(self.module, self.attr, self.args, dict(self.kwargs, **changes), self.root)

    def target(self):
        obj: Any = importlib.import_module(self.module)
        for part in self.attr.split("."):
            obj = getattr(obj, part)
        return obj

    def _value(self, value: Any) -> Any:
        if isinstance(value, ObjectArg):
            return value.make()
        if isinstance(value, str) and self.root and value and not os.path.isabs(value) and os.sep + ".." not in os.sep + value:
            path = os.path.join(self.root, value)
            if os.path.exists(path):  # configs/hiera_tiny.yaml, as the tests open it from the repo root
                return path
        if isinstance(value, list):
            return [self._value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._value(v) for v in value)
        return value

    def make(self) -> Any:
        return self.target()(*[self._value(a) for a in self.args], **{k: self._value(v) for k, v in self.kwargs.items()})

    def accepts(self, key: str) -> bool:
        """The callee takes ``key`` by name (a dataclass field, a keyword argument)."""
        try:
            target = self.target()
            params = init_params(target)[0] if isinstance(target, type) else dict(inspect.signature(target).parameters)
        except Exception:  # noqa: BLE001
            return False
        return key in params

    def params(self) -> Dict[str, Any]:
        """{name: default or NO_DEFAULT} of a class callee (a dataclass's fields), else {}."""
        try:
            target = self.target()
        except Exception:  # noqa: BLE001
            return {}
        return init_params(target)[0] if isinstance(target, type) else {}

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.attr.rsplit('.', 1)[-1] if '.' not in self.attr else self.attr}({', '.join(shown)})"


# modules whose functions load a configuration from a file the repo names (OmegaConf.load)
CONFIG_LOADERS = {"omegaconf", "yaml", "json", "toml", "tomllib"}


SCAN_SKIP = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist", "wandb", "outputs", "checkpoints", "data"}


def size_rank(name: str) -> int:
    words = name.lower().replace("-", "_").split("_")
    ranks = [_SIZE_WORDS.index(w) for w in words if w in _SIZE_WORDS]
    return max(ranks) if ranks else _SIZE_WORDS.index("base")


def guess(name: str) -> Any:
    """A small Hiera-consistent value for a required argument, from its name (None: no idea)."""
    n = name.lower()
    exact = {
        "in_chans": 3, "in_channels": 3, "input_channels": 3, "num_channels": 3, "num_classes": 10,
        "num_heads": 1, "heads": 1, "stages": (1, 1, 1, 1), "depths": (1, 1, 1, 1), "depth": 2,
        "input_size": (224, 224), "img_size": 224, "image_size": 224, "patch_size": 4, "mlp_ratio": 4.0,
        "q_pool": 2, "mask_ratio": 0.6, "dim": 8, "dim_out": 8, "embed_dim": 8,
        # upstream Hiera's 2-D grid (consistent with input_size above) and its other knobs
        "q_stride": (2, 2), "mask_unit_size": (8, 8), "mask_unit_attn": (True, True, False, False),
        "patch_kernel": (7, 7), "patch_stride": (4, 4), "patch_padding": (3, 3), "dim_mul": 2.0,
        "head_mul": 2.0, "norm_layer": "LayerNorm", "sep_pos_embed": False, "head_init_scale": 0.001,
    }
    if n in exact:
        return exact[n]
    if "stage" in n:
        return (1, 1, 1, 1)
    if n.startswith(("in_", "input_")) and ("chan" in n or "channel" in n):
        return 3
    if "head" in n:
        return 1
    if "class" in n:
        return 10
    if "chan" in n or "channel" in n or n.endswith("dim") or n.endswith("_dims") or "width" in n:
        return 8
    if "depth" in n or "layers" in n or n.endswith("blocks"):
        return 2
    if "drop" in n or n.endswith("_rate"):
        return 0.0
    if "ratio" in n:
        return 0.5
    if "size" in n:
        return 224
    if "stride" in n:
        return 4
    if n.startswith(("use_", "is_", "with_", "enable_")):
        return False
    return None


def is_size(name: str) -> bool:
    """A width/depth/count knob: a small value from its name beats the repo's own."""
    n = name.lower()
    if n.startswith(("in_", "input_")) or "ratio" in n or "drop" in n or "rate" in n:
        return False
    return n in SIZE_KNOBS or "stage" in n or n.endswith(("dim", "dims", "heads", "depth", "depths", "layers", "blocks", "classes"))


class ConfigSpec:
    """A constructor argument used as a configuration object (``cfg.embed_dim``,
    ``config["x"]``, ``args.get("x")``): the values it handed out, replayed on the
    rewritten side."""

    def __init__(self, values: Optional[Dict[str, Any]] = None) -> None:
        self.values: Dict[str, Any] = dict(values or {})

    def __repr__(self) -> str:
        return "<config " + ", ".join(f"{k}={v!r}" for k, v in self.values.items()) + ">"


class Config:
    """What the user's code gets for a :class:`ConfigSpec`: attribute and item access,
    ``get``, ``in``; an unknown key is filled like a missing argument."""

    def __init__(self, values: Dict[str, Any], fill: Callable[[str], Any]) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_fill", fill)

    def _wrap(self, value):
        return Config(value, self._fill) if isinstance(value, dict) else value

    def __getitem__(self, key):
        if key not in self._values:
            if not isinstance(key, str):
                raise KeyError(key)
            self._values[key] = self._fill(key)
        return self._wrap(self._values[key])

    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        return self[key]

    def __setattr__(self, key, value):
        self._values[key] = value

    __setitem__ = __setattr__

    def get(self, key, default=None):
        return self._wrap(self._values[key]) if key in self._values else default

    def __contains__(self, key) -> bool:
        return key in self._values

    def keys(self):
        return self._values.keys()

    def items(self):
        return [(k, self._wrap(v)) for k, v in self._values.items()]

    def __iter__(self):
        return iter(self._values)


_CONFIG_FILES = (".json", ".yaml", ".yml")


# shell scripts whose python command lines give the values the repo runs with
_SCRIPT_FILES = (".sh", ".bash", ".slurm", ".sbatch")


MAX_SCAN_FILES = 400


MAX_SCAN_BYTES = 1024 * 1024


class Option:
    """What the repo's argparse does with an option's words: ``convert`` (its ``type=``,
    :func:`argtypes.converter`; None: not known), ``nargs``, ``action`` and ``const``."""

    def __init__(self, convert: Optional[Callable[[str], Any]] = None, nargs: Any = None, action: Optional[str] = None, const: Any = None) -> None:
        self.convert, self.nargs, self.action, self.const = convert, nargs, action, const

    def takes(self) -> Optional[Tuple[int, Optional[int]]]:
        """(least, most) words the option takes (most None: any number), or None when not known."""
        if self.action in ("store_true", "store_false", "store_const", "count", "help", "version"):
            return 0, 0
        if self.nargs == "+":
            return 1, None
        if self.nargs in ("*", "..."):
            return 0, None
        if self.nargs == "?":
            return 0, 1
        if isinstance(self.nargs, int):
            return self.nargs, self.nargs
        if self.nargs is None and self.action in ("store", "append") :
            return 1, 1
        return None

    def value(self, words: List[str]) -> Any:
        """The value argparse gives for these words (a list where ``nargs`` makes one)."""
        if self.action == "store_true":
            return True
        if self.action == "store_false":
            return False
        if self.action == "store_const":
            return self.const
        items = [self.word(w) for w in words]
        if self.nargs in ("+", "*") or isinstance(self.nargs, int):
            return items
        if not items:
            return True if self.nargs != "?" else self.const
        return items[0] if len(items) == 1 else items

    def word(self, text: str) -> Any:
        if self.convert is not None:
            try:
                return self.convert(text)
            except Exception:  # noqa: BLE001 -- the repo's own function rejected it: read as before
                pass
        return _scalar(text, None)


def _scalar(text: str, kind: Optional[str]) -> Any:
    """A script's word as argparse's ``type`` would give it (``int``, ``float``, ``str``);
    with no known type: an int, a float, True/False, else the string."""
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    if kind == "str":
        return text
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "true": True, "false": False}.get(text, text)


def _option(kind: Any) -> Option:
    if isinstance(kind, Option):
        return kind
    return Option({"int": int, "float": float, "str": str}.get(kind) if isinstance(kind, str) else None)


_REDIRECT = re.compile(r"\d*[<>]|&>")


def _command_args(command: List[str], dests: Dict[str, str], kinds: Dict[str, Any],
                  parser_of: Optional[Callable[[str], Tuple[Dict[str, str], Dict[str, Any]]]] = None) -> Optional[Tuple[str, List[Tuple[str, Any]]]]:
    """(the script it runs, [(dest, value)]) of one command's words, or None where it runs
    no python script (see :func:`command_lines`)."""
    runs = [i for i, w in enumerate(command) if w.endswith(".py") and not w.startswith("-")]
    mod = [i + 1 for i, w in enumerate(command[:-1]) if w == "-m" and i and re.search(r"python[\d.]*$", command[i - 1])]
    begin = (runs or mod or [None])[0]
    if begin is None:
        return None
    script = command[begin] if runs and begin == runs[0] else command[begin].replace(".", "/") + ".py"
    if parser_of is not None:
        dests, kinds = parser_of(script)[:2]
    args = command[begin + 1:]
    # a redirection (2>&1, > log) ends the arguments
    args = args[:next((i for i, w in enumerate(args) if _REDIRECT.match(w)), len(args))]
    found: List[Tuple[str, Any]] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("--") or len(word) < 3:
            continue
        option, eq, inline = word.partition("=")
        dest = dests.get(option, option[2:].replace("-", "_"))
        spec = _option(kinds.get(dest))
        words_of: List[str] = [inline] if eq else []
        if not eq:
            most = (spec.takes() or (0, None))[1]
            while (most is None or len(words_of) < most) and i < len(args) and not (args[i].startswith("-") and not re.match(r"-\.?\d", args[i])):
                words_of.append(args[i])
                i += 1
        if any("$" in w for w in words_of):
            continue
        found.append((dest, spec.value(words_of)))
    return script, found


def command_lines(text: str, dests: Dict[str, str], kinds: Dict[str, Any],
                  parser_of: Optional[Callable[[str], Tuple[Dict[str, str], Dict[str, Any]]]] = None) -> List[Tuple[str, List[Tuple[str, Any]]]]:
    """(the script it runs, [(dest, value)]) of each python command line of a shell script
    (``python main.py``, ``torchrun ... main.py``, ``python -m pkg.main``), the script read
    as bash does (:func:`shell.commands`: ``$VAR`` from the script's own assignments, split
    into words but never into commands; quotes over several lines): its ``--name value``
    arguments, as many words as the option takes (``nargs``, a flag's action; unknown: up
    to the next option), converted as the repo's argparse would (``kinds``: dest ->
    :class:`Option`, or a type name; ``parser_of``: the script run -> its own (dests,
    kinds)); no words True (a flag); an argument whose value the script computes at run
    time (still holding ``$``) is skipped.  ``dests``: the repo's option -> dest."""
    from .shell import commands  # noqa: PLC0415

    out: List[Tuple[str, List[Tuple[str, Any]]]] = []
    for command in commands(text):
        run = _command_args(command, dests, kinds, parser_of)
        if run is not None:
            out.append(run)
    return out


def script_arguments(text: str, dests: Dict[str, str], kinds: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """(dest, value) of every ``--name value`` of the python command lines of a shell
    script, in order (:func:`command_lines`)."""
    return [pair for _, found in command_lines(text, dests, kinds) for pair in found]


_INT_LIST = re.compile(r"\s*-?\d+(\s*,\s*-?\d+)*\s*(;\s*-?\d+(\s*,\s*-?\d+)*\s*)*;?\s*")


def expects_sequence(name: str, like: Any = NO_DEFAULT) -> bool:
    """Whether an argument takes a sequence: its default (``like``) or the value
    :func:`guess` gives its name is a tuple/list, or it is the plural of one that is
    (``q_strides``: per stage, a ``q_stride`` each)."""
    if isinstance(like, (tuple, list)):
        return True
    if isinstance(guess(name), (tuple, list)):
        return True
    return name.endswith("s") and not name.endswith("ss") and isinstance(guess(name[:-1]), (tuple, list))


def as_sequence(name: str, value: Any, like: Any = NO_DEFAULT) -> Any:
    """A string of integers separated by ``,`` (``"64,4,32"``) as a tuple, and by ``;``
    between groups (``"5,1,1;1,3,1"``) as a list of tuples, where the argument takes a
    sequence (:func:`expects_sequence`): what the repo's own code parses its string
    argument into.  Anything else as it is."""
    if not isinstance(value, str) or not ("," in value or ";" in value) or not _INT_LIST.fullmatch(value) or not expects_sequence(name, like):
        return value
    groups = [tuple(int(v) for v in group.split(",")) for group in value.strip().strip(";").split(";")]
    if ";" in value:
        return groups
    return list(groups[0]) if isinstance(like, list) else groups[0]


class Namespace:
    """The arguments one run of the repo's training code gets: a python command line of its
    shell scripts (its ``--name value`` words, converted as its argparse does, over the
    argparse defaults of the script it runs), or a mapping of a config file whose keys are
    the repo's argparse options (a YAML ``base:`` the repo turns into a command line).
    ``values``: dest -> value; ``origin``: dest -> where it was found; ``where``: the run."""

    def __init__(self, where: str, values: Dict[str, Any], origin: Dict[str, str], given: Optional[Set[str]] = None) -> None:
        self.where, self.values, self.origin = where, values, origin
        self.given = set(values) if given is None else set(given)  # not argparse defaults

    def __repr__(self) -> str:
        return f"<arguments of {self.where}>"


def _parser_options(tree: ast.AST, path: Path, sources: Any) -> Tuple[Dict[str, str], Dict[str, Option], List[Tuple[str, Any]], List[Tuple[str, Any]]]:
    """({--option: dest}, {dest: Option}, [(dest, default)], [(dest, choice)]) of the
    ``add_argument`` calls of a Python file; a string default given through its ``type``
    (as argparse does), ``set_defaults(x=...)`` over the options' own."""
    from .argtypes import converter  # noqa: PLC0415

    dests: Dict[str, str] = {}
    options: Dict[str, Option] = {}
    defaults: List[Tuple[str, Any]] = []
    choices: List[Tuple[str, Any]] = []
    overrides: List[Tuple[str, Any]] = []  # parser.set_defaults(x=...): over add_argument's
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_defaults":
            for k in node.keywords:
                try:
                    overrides.append((k.arg, ast.literal_eval(k.value))) if k.arg else None
                except (ValueError, SyntaxError, TypeError):
                    pass
            continue
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        opts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        longs = [o for o in opts if o.startswith("--")] or [o for o in opts if not o.startswith("-")]
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else (longs[0].lstrip("-").replace("-", "_") if longs else None)
        if not dest or not isinstance(dest, str):
            continue
        for opt in opts:
            dests.setdefault(opt, dest)

        def const(key: str) -> Any:
            try:
                return ast.literal_eval(kw[key]) if key in kw else None
            except (ValueError, SyntaxError, TypeError):
                return None

        try:
            convert = converter(kw.get("type"), str(path), sources)
        except Exception:  # noqa: BLE001 -- an odd type: not known
            convert = None
        action = const("action") if isinstance(kw.get("action"), ast.Constant) else ("store" if "action" not in kw else None)
        option = Option(convert, const("nargs"), action, const("const"))
        options.setdefault(dest, option)
        if "default" in kw:
            try:
                default = ast.literal_eval(kw["default"])
            except (ValueError, SyntaxError, TypeError):
                pass
            else:
                if isinstance(default, str) and convert is not None and convert is not str:
                    try:
                        default = convert(default)
                    except Exception:  # noqa: BLE001
                        pass
                defaults.append((dest, default))
        elif action == "store_true":
            defaults.append((dest, False))
        elif action == "store_false":
            defaults.append((dest, True))
        if "choices" in kw:
            found = const("choices")
            if isinstance(found, (list, tuple, set)):
                choices.extend((dest, option_) for option_ in found)
    if overrides:
        set_to = dict(overrides)
        defaults = [(d, set_to.pop(d)) if d in set_to else (d, v) for d, v in defaults] + list(set_to.items())
    return dests, options, defaults, choices


def config_arguments(data: Dict[Any, Any], dests: Dict[str, str], options: Dict[str, Option]) -> Dict[str, Any]:
    """A config mapping's values as the repo's argparse gives them when the repo passes
    them as ``--key value`` (``input_size: 1 54`` -> [1, 54], ``q_strides: 5,1,1;15,1,1``
    through its own type; ``key: ~`` a flag): a string split into words, each converted
    (:class:`Option`); other keys and values as they are."""
    out: Dict[Any, Any] = {}
    for key, value in data.items():
        dest = dests.get(f"--{key}", key) if isinstance(key, str) else key
        option = options.get(dest) if isinstance(dest, str) else None
        if option is not None and isinstance(value, str):
            words = value.split()
            spec_takes = option.takes()
            if len(words) == 1 or option.nargs in ("+", "*") or isinstance(option.nargs, int) or spec_takes is None:
                value = option.value(words) if words else value
        elif option is not None and value is None and option.action in ("store_true", "store_false", "store_const"):
            value = option.value([])
        out[key] = value
    return out


def _is_namespace(data: Any, dests: Dict[str, str]) -> bool:
    """A mapping most of whose keys are the repo's argparse options (at least 3)."""
    if not isinstance(data, dict):
        return False
    keys = [k for k in data if isinstance(k, str)]
    known = [k for k in keys if f"--{k}" in dests or f"--{k.replace('_', '-')}" in dests]
    return len(known) >= 3 and 2 * len(known) >= len(keys)


def repo_values(root: str, skip: Set[str], every: Optional[Dict[str, List[Tuple[Any, str]]]] = None,
                namespaces: Optional[List[Namespace]] = None) -> Dict[str, Tuple[Any, str]]:
    """{name: (value, where)}: the values the repo itself uses -- the ``--name value``
    arguments of the python command lines of its shell scripts (what it runs), keys of
    its JSON configs (YAML too where a YAML parser is importable here), argparse
    ``add_argument("--x", default=...)`` in its scripts (what it runs when a script gives
    none).  In that order, the first found wins; within a kind smaller model names
    ("tiny") and shallower files first.  A script's words and a config value for an
    argparse option are what the repo's argparse makes of them (its ``type=`` functions,
    :mod:`argtypes`; ``nargs``).  ``every``, if given, gets each value found for each
    name, in that order, argparse ``choices=[...]`` after the defaults; ``namespaces``,
    if given, each run's whole set of arguments (:class:`Namespace`), in that order."""
    from .argtypes import Sources  # noqa: PLC0415

    every = every if every is not None else {}
    namespaces = namespaces if namespaces is not None else []
    try:
        import yaml  # noqa: PLC0415 -- the user's environment may lack it
    except Exception:  # noqa: BLE001
        yaml = None
    found: List[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        found.extend(Path(folder, n) for n in names if n.endswith((".py",) + _CONFIG_FILES + _SCRIPT_FILES))
        if len(found) > MAX_SCAN_FILES:
            break
    found.sort(key=lambda f: (f.suffix == ".py", f.suffix in _CONFIG_FILES, size_rank(f.stem), len(f.parts), str(f)))
    values: Dict[str, Tuple[Any, str]] = {}
    defaults: Dict[str, Tuple[Any, str]] = {}  # argparse: after the scripts and configs
    choices: List[Tuple[str, Any, str]] = []  # argparse choices=[...]: after the defaults
    found_defaults: List[Tuple[str, Any, str]] = []
    dests: Dict[str, str] = {}  # --option -> dest
    kinds: Dict[str, Option] = {}  # dest -> what its argparse does with its words
    parsers: Dict[str, Tuple[Dict[str, str], Dict[str, Option], Dict[str, Any]]] = {}  # file -> its parser's
    pyfiles: Dict[str, Path] = {}  # every Python file read, by its path in the repo
    sources = Sources(root)

    def take(data, where: str) -> None:
        if isinstance(data, dict):
            if any(isinstance(k, str) and (f"--{k}" in dests) for k in data):
                data = config_arguments(data, dests, kinds)
            for key, value in data.items():
                if isinstance(key, str):
                    values.setdefault(key, (value, where))
                    every.setdefault(key, []).append((value, where))
                    take(value, where)

    def configs(data, where: str, depth: int = 0) -> None:
        """The mappings of a config file that are a run's arguments."""
        if depth > 3:
            return
        if _is_namespace(data, dests):
            args = config_arguments(data, dests, kinds)
            args = {dests.get(f"--{k}", k): v for k, v in args.items() if isinstance(k, str)}
            origin = {k: where for k in args}
            given = set(args)
            for dest, (value, at) in defaults.items():
                if dest not in args:
                    args[dest], origin[dest] = value, at
            namespaces.append(Namespace(where, args, origin, given))
        if isinstance(data, dict):
            for key, value in data.items():
                configs(value, f"{where}:{key}" if depth == 0 else f"{where}.{key}", depth + 1)

    texts: List[Tuple[Path, str, str]] = []
    for path in found[:MAX_SCAN_FILES]:
        try:
            if path.stat().st_size > MAX_SCAN_BYTES:
                continue
            text = path.read_text(errors="replace")
        except OSError:
            continue
        where = os.path.relpath(path, root)
        texts.append((path, text, where))
        if path.suffix != ".py":
            continue
        pyfiles[where] = path
        if "add_argument" not in text and "set_defaults" not in text:
            continue  # no parser here: parsed only if a script runs it (its imports)
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        sources.add(str(path), tree)
        file_dests, file_options, file_defaults, file_choices = _parser_options(tree, path, sources)
        parsers[where] = (file_dests, file_options, dict(file_defaults))
        for opt, dest in file_dests.items():
            dests.setdefault(opt, dest)
        for dest, option in file_options.items():
            kinds.setdefault(dest, option)
        for dest, default in file_defaults:
            defaults.setdefault(dest, (default, f"{where} --{dest}"))
            found_defaults.append((dest, default, f"{where} --{dest}"))
        choices.extend((dest, option, f"{where} --{dest} choices") for dest, option in file_choices)

    def imports_of(where: str) -> List[str]:
        """The repo files a Python file imports at its top level."""
        path = str(pyfiles[where])
        tree = sources.tree(path)
        found = []
        for n in tree.body if tree is not None else []:
            if isinstance(n, ast.ImportFrom):
                found.append(sources.module_file(n.module or "", n.level, path))
            elif isinstance(n, ast.Import):
                found.extend(sources.module_file(a.name, 0, path) for a in n.names)
        return [os.path.relpath(f, root) for f in found if f is not None]

    ran: Dict[str, Tuple[Dict[str, str], Dict[str, Option], Dict[str, Any], Optional[str]]] = {}

    def parser_of(script: str) -> Tuple[Dict[str, str], Dict[str, Option], Dict[str, Any], Optional[str]]:
        """The argparse a command line's script uses: its own, else that of the repo files
        it imports (run_pretrain.py: main_pretrain's get_args_parser); else the repo's."""
        if script in ran:
            return ran[script]
        norm = os.path.normpath(script).lstrip("./") if "$" not in script else None
        cands = [w for w in pyfiles if norm and (w == norm or w.endswith(os.sep + norm))] or \
                [w for w in pyfiles if norm and os.path.basename(w) == os.path.basename(norm)]
        found = (dests, kinds, {k: v for k, (v, _) in defaults.items()}, None)
        for w in cands[:1]:
            for f in [w] + (imports_of(w) if not (w in parsers and parsers[w][1]) else []):
                if f in parsers and parsers[f][1]:
                    d, o, defs = parsers[f]
                    found = (dict(dests, **d), dict(kinds, **o), defs, f)
                    break
        ran[script] = found
        return found

    for path, text, where in texts:
        try:
            if path.suffix in _SCRIPT_FILES:
                for script, pairs in command_lines(text, dests, kinds, parser_of):
                    for dest, value in pairs:
                        values.setdefault(dest, (value, f"{where} --{dest}"))
                        every.setdefault(dest, []).append((value, f"{where} --{dest}"))
                    if not pairs:
                        continue
                    file_defaults, used = parser_of(script)[2:]
                    args = {}
                    origin = {}
                    for dest, value in pairs:  # argparse: the last one given wins
                        args[dest], origin[dest] = value, f"{where} --{dest}"
                    given = set(args)
                    for dest, value in file_defaults.items():
                        if dest not in args:
                            args[dest], origin[dest] = value, f"{used or 'argparse'} --{dest}"
                    namespaces.append(Namespace(f"{where} (python {script})", args, origin, given))
            elif path.suffix == ".json":
                data = json.loads(text)
                take(data, where)
                configs(data, where)
            elif path.suffix in (".yaml", ".yml"):
                if yaml is not None:
                    data = yaml.safe_load(text)
                    take(data, where)
                    configs(data, where)
        except Exception:  # noqa: BLE001 -- an unreadable or odd file only gives no values
            continue
    for dest, found_value in defaults.items():
        values.setdefault(dest, found_value)
    for dest, value, where in found_defaults + choices:
        every.setdefault(dest, []).append((value, where))
    return values


def _annotation(ctor, name: str) -> Any:
    """The annotation of ``ctor``'s parameter ``name`` (a string one looked up in its
    module), else None."""
    try:
        param = inspect.signature(ctor).parameters.get(name)
    except (TypeError, ValueError):
        return None
    ann = param.annotation if param is not None else None
    if isinstance(ann, str):
        target = ctor.__init__ if isinstance(ctor, type) else ctor
        try:
            ann = eval(ann, dict(getattr(inspect.getmodule(target), "__dict__", {})))  # noqa: S307 -- the user's own annotation
        except Exception:  # noqa: BLE001
            return None
    return None if ann is inspect.Parameter.empty else ann


def module_annotation(ctor, name: str) -> Optional[type]:
    """The ``nn.Module`` class a parameter of ``ctor`` is annotated with (``encoder: Hiera``,
    ``encoder: nn.Module``; a string annotation is looked up in its module), else None."""
    nn = getattr(sys.modules.get("torch"), "nn", None)
    ann = _annotation(ctor, name)
    if nn is not None and isinstance(ann, type) and issubclass(ann, nn.Module):
        return ann
    return None


def config_defaults(ctor, name: str) -> Tuple[Dict[str, Any], str]:
    """(field defaults, class name) of the dataclass a configuration parameter is annotated
    with (``cfg: HieraConfig``): what the user's own code builds when it makes one with no
    arguments; ({}, "") for any other annotation."""
    import dataclasses  # noqa: PLC0415

    ann = _annotation(ctor, name)
    if not (isinstance(ann, type) and dataclasses.is_dataclass(ann)):
        return {}, ""
    values: Dict[str, Any] = {}
    for field in dataclasses.fields(ann):
        if field.default is not dataclasses.MISSING:
            values[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            try:
                values[field.name] = field.default_factory()
            except Exception:  # noqa: BLE001 -- the user's factory: that field is filled as before
                pass
    return values, ann.__name__


def config_params(ctor) -> List[str]:
    """Parameters of ``ctor`` (a class: its ``__init__``; a function) that its body
    uses as a configuration object: ``p.x``, ``p["x"]``, ``p.get("x")``."""
    target = ctor.__init__ if isinstance(ctor, type) else ctor
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(target))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return []
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    args = node.args
    positional = [*args.posonlyargs, *args.args][1 if isinstance(ctor, type) else 0:]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    # only arguments a caller must give (or that default to None): a sized default is data;
    # not one annotated as a module (encoder: nn.Module reading encoder.norm is a model)
    names = {a.arg for a, d in pairs if (d is None or (isinstance(d, ast.Constant) and d.value is None)) and module_annotation(ctor, a.arg) is None}
    used: List[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and not sub.attr.startswith("_") and sub.attr not in ("index", "count", "shape", "dtype"):
            base = sub.value
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str):
            base = sub.value
        else:
            continue
        if isinstance(base, ast.Name) and base.id in names and base.id not in used:
            used.append(base.id)
    return used


def named_factory(holder: Any) -> Optional[Tuple[str, str]]:
    """(name, where) of the smallest model a module makes by name: its own public functions
    and classes (a top-level def or class there, or a name bound to a call such as
    ``partial(Hiera, ...)``; not imported) whose name has a size word (``hiera_tiny_224``
    before ``hiera_base_224``); None for anything but a module, or where no name says a size
    (a helper taken for a factory would only fail to build, but it is not guessed)."""
    if not inspect.ismodule(holder):
        return None
    try:  # defined there: a top-level def or class, or a name bound to a call (partial(...))
        body = ast.parse(inspect.getsource(holder)).body
    except (OSError, TypeError, SyntaxError):
        return None
    defined = [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    defined += [t.id for n in body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) for t in n.targets if isinstance(t, ast.Name)]
    own = [
        k for k in defined
        if not k.startswith("_") and callable(vars(holder).get(k)) and any(w in _SIZE_WORDS for w in k.lower().replace("-", "_").split("_"))
    ]
    if not own:
        return None
    key = min(own, key=lambda k: (size_rank(k), own.index(k)))
    return key, f"a factory of {holder.__name__}, called by name"


def registry_key(ctor, name: str) -> Optional[Tuple[str, str]]:
    """(key, where) for an argument the constructor looks up in a registry of its module:
    ``MODEL_CONFIGS[model_name]``, ``MODELS.get(arch)`` with ``MODEL_CONFIGS`` a module-level
    dict keyed by strings, the key of the smallest model ("tiny" before "base"); or a factory
    it calls by name, ``getattr(models, model_name)`` with ``models`` a module, or
    ``globals()[model_name]``: the name of the smallest of that module's own functions and
    classes whose name says a size (:func:`named_factory`); else None."""
    module = sys.modules.get(getattr(ctor, "__module__", "") or "")
    if isinstance(ctor, type):  # its own __init__ as written (upstream's @has_config hides it)
        node = _init_node(ctor)
    else:
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(ctor)))
        except (OSError, TypeError, SyntaxError):
            node = None
    if node is None:
        return None
    for sub in ast.walk(node):
        # a factory handing its kwargs["model_name"] on to a class: that class's registry
        if not isinstance(ctor, type) and isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and module is not None:
            for kw in sub.keywords:
                value = kw.value
                if kw.arg and isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and value.slice.value == name:
                    callee = vars(module).get(sub.func.id)
                    found = registry_key(callee, kw.arg) if isinstance(callee, type) else None
                    if found is not None:
                        return found
        table = None
        if (
            isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "getattr" and len(sub.args) >= 2
            and isinstance(sub.args[0], ast.Name) and isinstance(sub.args[1], ast.Name) and sub.args[1].id == name and module is not None
        ):
            found = named_factory(vars(module).get(sub.args[0].id))
            if found is not None:
                return found
            continue
        if (
            isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name) and sub.slice.id == name and isinstance(sub.value, ast.Call)
            and isinstance(sub.value.func, ast.Name) and sub.value.func.id == "globals" and not sub.value.args
        ):
            found = named_factory(module)
            if found is not None:
                return found
            continue
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name) and sub.slice.id == name:
            table = sub.value
        elif (
            isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get"
            and sub.args and isinstance(sub.args[0], ast.Name) and sub.args[0].id == name
        ):
            table = sub.func.value
        if not isinstance(table, ast.Name) or module is None:
            continue
        found = vars(module).get(table.id)
        if isinstance(found, dict) and found and all(isinstance(k, str) for k in found):
            key = min(found, key=lambda k: (size_rank(k), list(found).index(k)))
            return key, f"a key of {getattr(module, '__name__', '?')}.{table.id}"
    return None


def _code_nodes(ctor) -> List[Tuple[ast.AST, Any, str]]:
    """(syntax tree, module, qualified name) of what runs when ``ctor`` is called: a
    function's body, or the ``__init__`` of a class and of its bases in the user's files
    (not torch's)."""
    out: List[Tuple[ast.AST, Any, str]] = []
    if isinstance(ctor, type):
        for klass in ctor.__mro__:
            if "__init__" not in vars(klass) or klass.__module__.startswith(("torch.", "builtins")):
                continue
            node = _init_node(klass)
            if node is not None:
                out.append((node, sys.modules.get(klass.__module__), f"{klass.__name__}.__init__"))
        return out
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(ctor)))
    except (OSError, TypeError, SyntaxError):
        return out
    return [(node, sys.modules.get(getattr(ctor, "__module__", "") or ""), getattr(ctor, "__qualname__", "?"))]


def _strings(node: ast.AST) -> List[str]:
    """The string literals of a constant or of a tuple/list/set of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _table_keys(node: ast.AST, module) -> List[str]:
    """The string keys of a module-level dict a name refers to (``MODEL_CONFIGS``)."""
    if not isinstance(node, ast.Name) or module is None:
        return []
    found = vars(module).get(node.id)
    if isinstance(found, dict) and found and all(isinstance(k, str) for k in found):
        return list(found)
    return []


def code_values(ctor, name: str, depth: int = 0) -> List[Tuple[str, str]]:
    """(value, where) of every string the code of ``ctor`` (:func:`_code_nodes`) names for
    its argument ``name``: what it compares it with (``if model_name == "hiera_base_224":``,
    ``model_name in ("a", "b")``, ``match model_name: case "a":``), the keys of a
    module-level table it looks it up in or checks it against (``CONFIGS[model_name]``,
    ``CONFIGS.get(model_name)``, ``model_name in CONFIGS``), the size-named factories of a
    module it calls by that name (``getattr(zoo, model_name)``, ``globals()[model_name]``),
    and the same in a function of its module it hands the name to (``get_config(model_name)``)."""
    out: List[Tuple[str, str]] = []
    if depth > 2:
        return out

    def named(node: ast.AST) -> bool:
        """The argument itself: ``model_name``, or read from ``**kwargs`` (``kwargs["model_name"]``,
        ``kwargs.get("model_name")``)."""
        if isinstance(node, ast.Name):
            return node.id == name
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            return isinstance(node.slice, ast.Constant) and node.slice.value == name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and isinstance(node.func.value, ast.Name):
            return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == name
        return False

    for tree, module, qual in _code_nodes(ctor):
        where = f"named in {qual}"
        for sub in ast.walk(tree):
            if isinstance(sub, ast.Compare) and len(sub.ops) == 1:
                left, right = sub.left, sub.comparators[0]
                if isinstance(sub.ops[0], (ast.Eq, ast.NotEq)):
                    other = right if named(left) else left if named(right) else None
                    out.extend((v, where) for v in (_strings(other) if other is not None and isinstance(other, ast.Constant) else []))
                elif isinstance(sub.ops[0], (ast.In, ast.NotIn)) and named(left):
                    out.extend((v, where) for v in _strings(right))
                    keys = _table_keys(right, module)
                    out.extend((k, f"a key of {getattr(module, '__name__', '?')}.{right.id}") for k in keys)  # type: ignore[attr-defined]
            elif isinstance(sub, ast.Match) and named(sub.subject):
                for case in sub.cases:
                    for pattern in ast.walk(case.pattern):
                        if isinstance(pattern, ast.MatchValue):
                            out.extend((v, where) for v in _strings(pattern.value))
            elif isinstance(sub, ast.Subscript) and named(sub.slice):
                keys = _table_keys(sub.value, module)
                out.extend((k, f"a key of {getattr(module, '__name__', '?')}.{sub.value.id}") for k in keys)  # type: ignore[attr-defined]
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get" and sub.args and named(sub.args[0]):
                keys = _table_keys(sub.func.value, module)
                out.extend((k, f"a key of {getattr(module, '__name__', '?')}.{sub.func.value.id}") for k in keys)  # type: ignore[attr-defined]
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and module is not None:
                # a helper or class of its module given the name: get_config(model_name),
                # Hiera(model_name=kwargs["model_name"]): what that one names for it
                helper = vars(module).get(sub.func.id)
                if not (inspect.isfunction(helper) or isinstance(helper, type)) or helper is ctor or getattr(helper, "__module__", "").startswith(("torch", "builtins")):
                    continue
                try:
                    positional = [p.name for p in inspect.signature(helper).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                except (TypeError, ValueError):
                    continue
                passed = [positional[i] for i, a in enumerate(sub.args) if named(a) and i < len(positional)]
                passed += [k.arg for k in sub.keywords if k.arg and named(k.value)]
                for param in passed:
                    out.extend(code_values(helper, param, depth + 1))
    found = registry_key(ctor, name)
    if found is not None:  # getattr(zoo, model_name), globals()[...], a factory's kwargs[...] handed on
        out.append(found)
    unique: Dict[str, str] = {}
    for value, where in out:
        unique.setdefault(value, where)
    return list(unique.items())


_INIT_NODES: Dict[Any, Optional[ast.FunctionDef]] = {}


def _init_node(cls) -> Optional[ast.FunctionDef]:
    """The class's own ``def __init__`` as written (read-only; parsed once per class:
    ``inspect.getsource`` of a class parses its whole module on every call)."""
    if cls not in _INIT_NODES:
        _INIT_NODES[cls] = _parse_init(cls)
    return _INIT_NODES[cls]


def _parse_init(cls) -> Optional[ast.FunctionDef]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    return None


def init_params(cls) -> Tuple[Dict[str, Any], Set[str]]:
    """({name: default or NO_DEFAULT}, required names) accepted by ``cls(...)``, following
    ``**kwargs`` into the base classes' ``__init__``, and through undecorated wrappers
    (upstream's ``@has_config`` hides the signature behind ``*args, **kwargs``)."""
    params: Dict[str, Any] = {}
    required: Set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass.__module__.startswith("torch."):
            continue
        node = _init_node(klass)
        module = sys.modules.get(klass.__module__)
        env = dict(vars(module)) if module else {}
        var_kw = True
        if node is not None:
            args = node.args
            positional = [*args.posonlyargs, *args.args][1:]
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
            for arg, default in pairs:
                if arg.arg in params:
                    continue
                if default is None:
                    params[arg.arg] = NO_DEFAULT
                    required.add(arg.arg)
                    continue
                try:
                    params[arg.arg] = eval(compile(ast.Expression(default), "<default>", "eval"), env)  # noqa: S307 -- the user's own code
                except Exception:  # noqa: BLE001
                    params[arg.arg] = NO_DEFAULT
            var_kw = args.kwarg is not None
        else:
            try:
                sig = inspect.signature(klass.__init__)
            except (TypeError, ValueError):
                break
            var_kw = False
            for p in list(sig.parameters.values())[1:]:
                if p.kind == p.VAR_KEYWORD:
                    var_kw = True
                elif p.kind != p.VAR_POSITIONAL and p.name not in params:
                    params[p.name] = p.default if p.default is not p.empty else NO_DEFAULT
                    if p.default is p.empty:
                        required.add(p.name)
        if not var_kw:
            break
    return params, required


def runtime_switches(cls) -> List[str]:
    """Constructor arguments of ``cls`` (its ``__init__`` and its bases' in the user's
    files) that default to False and that a method other than ``__init__`` reads as
    ``self.<name>``: switches of a code path at run time (``return_likelihoods=False``,
    ``data_augment=False``), in signature order; not ones loading weights."""
    flags = [n for n, d in init_params(cls)[0].items() if d is False and not any(w in n.lower() for w in _CHECKPOINT_WORDS)]
    read: Set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(("torch", "builtins")):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                read |= {s.attr for s in ast.walk(node) if isinstance(s, ast.Attribute) and isinstance(s.value, ast.Name) and s.value.id == "self" and isinstance(s.ctx, ast.Load)}
    return [n for n in flags if n in read]


def literal(node: ast.AST, env: Dict[str, Any]) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        pass
    return eval(compile(ast.Expression(node), "<factory>", "eval"), env)  # noqa: S307 -- the user's own code


def callee(node: ast.AST, module) -> Tuple[Any, Optional[str]]:
    """(object, name of a module-level function) that a call's func names."""
    dotted: List[str] = []
    while isinstance(node, ast.Attribute):
        dotted.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None, None
    obj = vars(module).get(node.id)
    for attr in dotted:
        obj = getattr(obj, attr, None)
    return obj, (node.id if not dotted else None)


class MissingArgs(Exception):
    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(", ".join(names))
        self.names = list(names)


class MissingKey(MissingArgs, AttributeError, KeyError):
    """No value for a key: also an AttributeError/KeyError, so that the user's
    ``getattr(cfg, "x", default)`` / ``hasattr`` / ``try: ... except KeyError`` keep working."""

    def __init__(self, name: str) -> None:
        super().__init__([name])

    def __str__(self) -> str:
        return self.names[0]


MAX_CHOICES = 6


def _has_size_word(value: str) -> bool:
    return any(w in _SIZE_WORDS for w in re.split(r"[^a-z]+", value.lower()))


def names_a_model(name: str) -> bool:
    """An argument that names the model (``model_name``, ``arch``, ``variant``...)."""
    n = name.lower()
    return n.endswith("name") or n in ("arch", "architecture", "variant", "model", "model_type", "model_id", "backbone", "backbone_type")


def variant_key(value: Any) -> Any:
    """A model name without its size words (``mae_hiera_tiny_224`` and ``mae_hiera_base_224``
    are one kind, ``mae_hiera_base_16x224`` another); anything else as it is."""
    if not isinstance(value, str):
        return value
    return "_".join(w for w in re.split(r"[^a-z0-9]+", value.lower()) if w not in _SIZE_WORDS)


_INPUT_NAMES = ("input_size", "img_size", "image_size", "input_shape", "image_shape", "seq_len", "sequence_length", "num_frames")


def _input_cost(ns: "Namespace") -> float:
    """The number of input elements a run's configuration states (its first size-named
    value: ``input_size: [450, 1, 75]``); inf where it states none, or fewer dims than its
    patches have (``input_size: 1 54`` with ``patch_kernel: 10 1 54``: the frames, free,
    are not in it)."""
    patches = [len(v) for k, v in ns.values.items() if k.startswith("patch") and isinstance(v, (list, tuple))]
    for name in _INPUT_NAMES:
        value = ns.values.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return float(value) if not patches or max(patches) <= 1 else math.inf
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            return float(math.prod(value)) if not patches or len(value) >= max(patches) else math.inf
    return math.inf


def passthrough(func) -> Optional[Tuple[Dict[str, str], List[str]]]:
    """For a factory taking ``**kwargs`` that reads keys of it and hands it on to the model
    it returns -- ``def f(**kw): return Net(embed_dim=kw["init_embed_dim"], ..., **kw)``,
    the factory a training script calls with its whole argparse namespace
    (``models.__dict__[args.model](**vars(args))``) --: ({keyword: the key it is read
    from}, [the keys read]); None for anything else (upstream's ``hiera_tiny_224(**kw)``
    reads no key)."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.FunctionDef) or node.args.kwarg is None:
        return None
    kw = node.args.kwarg.arg

    def key_of(expr: ast.AST) -> Optional[str]:
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and expr.value.id == kw:
            return expr.slice.value if isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str) else None
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get"
                and isinstance(expr.func.value, ast.Name) and expr.func.value.id == kw and expr.args
                and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str)):
            return expr.args[0].value
        return None

    reads = [k for k in (key_of(sub) for sub in ast.walk(node)) if k is not None]
    handed: Dict[str, str] = {}
    passes = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw for k in sub.keywords):
            passes = True
            for k in sub.keywords:
                key = key_of(k.value) if k.arg else None
                if key is not None:
                    handed[k.arg] = key
    if not passes or not reads:
        return None
    return handed, list(dict.fromkeys(reads))


class Building:
    """Builds candidates small, filling what they need (a mixin of the worker)."""

    _inner: List[Any] = []  # the classes whose modes are being made for a module argument
    _repo_every: Dict[str, List[Tuple[Any, str]]] = {}  # name -> every value the repo gives, in order
    _namespaces: List["Namespace"] = []  # each run's arguments (repo_values), in order

    def scan_root(self) -> str:
        """The folder whose scripts, configs and tests give values: the repo root (VCS
        root, else the folder holding a project file) where the import root lies in it,
        else the import root."""
        from .layout import repo_root  # noqa: PLC0415

        root = Path(self.spec["project_dir"])
        repo = repo_root(root / "_")
        return str(repo) if repo is not None and (repo == root or repo in root.parents) else str(root)

    @staticmethod
    def resolve(module_name: str, attr: str):
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def repo(self) -> Dict[str, Tuple[Any, str]]:
        """The repo's own values: what its scripts pass to the models and factories of
        the files (``Hiera(model_name="hiera_tiny_224")``, :meth:`call_values`) first, then
        its argparse defaults and config files (:func:`repo_values`)."""
        if self._repo is None:
            every: Dict[str, List[Tuple[Any, str]]] = {}
            namespaces: List[Namespace] = []
            self._repo = dict(self.call_values(every))
            for key, value in repo_values(self.scan_root(), SCAN_SKIP, every, namespaces).items():
                self._repo.setdefault(key, value)
            self._repo_every = every
            self._namespaces = namespaces
        return self._repo

    def choices(self, name: str, ctor: Any = None, like: Any = NO_DEFAULT) -> List[Tuple[Any, str]]:
        """(value, where) of the strings the repo gives an argument, smallest model first
        (``hiera_tiny_224`` before ``hiera_base_224``; otherwise in the order found): every
        value its scripts pass to the models and factories, its shell scripts' and configs'
        values, its argparse defaults and ``choices``, then the values the constructor's
        own code names (:func:`code_values`).  At most :data:`MAX_CHOICES`."""
        self.repo()
        found = [(v, w) for v, w in self._repo_every.get(name, []) if isinstance(v, str) and isinstance(as_sequence(name, v, like), str)]
        # the constructor's own code, then that of the other models and factories of the
        # files taking an argument so named (a registry a sibling factory looks it up in)
        others = [getattr(sys.modules.get(f["module"]), f["attr"], None) for f in getattr(self, "_factories", {}).values()]
        others += list(getattr(self, "_model_classes", {}).values())
        for code in [ctor, *(o for o in others if o is not None and o is not ctor)]:
            if code is None:
                continue
            try:
                takes = name in (init_params(code)[0] if isinstance(code, type) else inspect.signature(code).parameters)
            except (TypeError, ValueError):
                takes = False
            if takes or code is ctor:
                found += code_values(code, name)
        # last: for a model's name (model_name, arch, variant), the names of the files'
        # factories that build that class (mae_hiera_tiny_224): the repo's names for its models
        if names_a_model(name) and isinstance(ctor, type):
            makers = [f["attr"] for f in getattr(self, "_factories", {}).values() if f.get("cls") is ctor]
            found += [(m, f"the name of a factory of {ctor.__name__}") for m in makers]
        elif names_a_model(name) and inspect.isfunction(ctor) and any(f["attr"] == ctor.__name__ for f in getattr(self, "_factories", {}).values()):
            found.append((ctor.__name__, "the factory's own name"))
        unique: Dict[str, str] = {}
        for value, where in found:
            if value:
                unique.setdefault(value, where)
        ordered = sorted(unique.items(), key=lambda vw: size_rank(vw[0]) if _has_size_word(vw[0]) else len(_SIZE_WORDS))
        return ordered[:MAX_CHOICES]

    def chosen(self, mode: Dict[str, Any]) -> Dict[str, Any]:
        """{name: value} of the arguments a mode's builds took from the repo's choices (the
        first, smallest, of each) and its keyword arguments lack: what a ``--factory`` line
        for that mode must give too."""
        try:
            ctor = self.resolve(mode["module"], mode["attr"])
            params = set(init_params(ctor)[0]) if isinstance(ctor, type) else set(inspect.signature(ctor).parameters)
        except Exception:  # noqa: BLE001
            return {}
        out: Dict[str, Any] = {}
        for name, (values, _) in vars(self).get("_choice", {}).items():
            if name in params and name not in mode.get("kwargs", {}) and values:
                out[name] = values[0][0]
        return out

    def next_choice(self, kwargs: Dict[str, Any], filled: Dict[str, Any]) -> Optional[Tuple[str, Any, str]]:
        """After a build raised: the next value to try of an argument that took the first of
        its :meth:`choices` in this build (name, value, where), set in ``kwargs`` (or the
        configuration object holding it) and ``filled``; None when none is left."""
        for name in list(filled):
            entry = vars(self).get("_choice", {}).get(name)
            if entry is None or filled[name] != entry[0][entry[1]][0] or entry[1] + 1 >= len(entry[0]):
                continue
            index = entry[1] + 1
            value, where = entry[0][index]
            vars(self)["_choice"][name] = (entry[0], index)
            holders = [kwargs] if name in kwargs else [v.values for v in kwargs.values() if isinstance(v, ConfigSpec) and name in v.values]
            if not holders:
                continue
            holders[0][name] = filled[name] = value
            self.origin[name] = where
            return name, value, where
        return None

    def fill(self, name: str, filled: Dict[str, Any], like: Any = NO_DEFAULT, ctor: Any = None, defaults: Tuple[Dict[str, Any], str] = ({}, "")) -> Any:
        """A value for an argument or configuration key nobody gave: the user's
        ``--kwargs``; for a size (dims, heads, stages) a small one from its name; else a
        default of the dataclass the configuration is annotated with (``defaults``:
        :func:`config_defaults`, as a constructor's own default); else the repo's own (a
        script's argument, config file, argparse default; a string of integers as the
        sequence it stands for where one is expected, :func:`as_sequence`; ``like``: the
        constructor's default, if any); else one from its name."""
        if name in self.spec["kwargs"]:
            filled[name] = value = self.spec["kwargs"][name]
            self.origin[name] = "--kwargs"
            return value
        small = guess(name)
        if name in defaults[0]:
            value, self.origin[name] = defaults[0][name], f"a default of {defaults[1]}"
            if is_size(name) and small is not None:  # as for a constructor's sizes: small
                if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) for v in value):
                    small = type(value)(1 for _ in value)  # as many stages, one block each
                value, self.origin[name] = small, None
            filled[name] = value
            return value
        repo = self.repo().get(name)
        if repo is not None:
            repo = (as_sequence(name, repo[0], like), repo[1])
        if repo is not None and is_size(name) and isinstance(repo[0], (tuple, list)) and repo[0] and all(isinstance(v, int) for v in repo[0]):
            small = type(repo[0])(1 for _ in repo[0])  # as many stages as the repo's, one block each
        keyed = registry_key(ctor, name) if repo is None and small is None and ctor is not None else None
        # a name the repo gives as a string, or one nothing else gives: each string the repo
        # and the constructor's code name for it, smallest model first (a build that raises
        # tries the next: :meth:`next_choice`)
        named: List[Tuple[Any, str]] = []
        if (repo is None and small is None) or (repo is not None and isinstance(repo[0], str) and not (small is not None and is_size(name))):
            named = self.choices(name, ctor, like)
        elif repo is None and small is not None and not isinstance(small, str) and not is_size(name) and ctor is not None and code_values(ctor, name):
            named = self.choices(name, ctor, like)  # model_size="tiny": the constructor compares it with strings
        if named:
            value, self.origin[name] = named[0]
            vars(self).setdefault("_choice", {})[name] = (named, 0)  # name -> (its choices, the one taken)
        elif repo is not None and (small is None or not is_size(name)):
            value, self.origin[name] = repo
        elif keyed is not None:
            value, self.origin[name] = keyed
        elif small is not None:
            value, self.origin[name] = small, None
        else:
            raise MissingKey(name)
        filled[name] = value
        return value

    @staticmethod
    def _accepts(ctor) -> Tuple[Set[str], bool]:
        try:
            params = inspect.signature(ctor).parameters.values()
        except (TypeError, ValueError):
            return set(), True
        return {p.name for p in params}, any(p.kind == p.VAR_KEYWORD for p in params)

    def construct(self, ctor: Callable, kwargs: Dict[str, Any], torch, filled: Dict[str, Any]):
        """ctor(**kwargs), filling missing required arguments, ``kwargs[...]`` keys and
        the keys a configuration object is asked for (:meth:`fill`, recorded in
        ``filled``).  ``kwargs`` is updated to what rebuilds the same model."""
        defaults: Dict[str, Tuple[Dict[str, Any], str]] = {}
        for name in config_params(ctor):
            defaults[name] = config_defaults(ctor, name)
            if not isinstance(kwargs.get(name), (ConfigSpec, ModuleArg)):
                given = kwargs.get(name)
                kwargs[name] = ConfigSpec(given if isinstance(given, dict) else {})
        specs = [v for v in kwargs.values() if isinstance(v, ConfigSpec)]
        accepted, var_kw = self._accepts(ctor)
        if not var_kw:
            for key in [k for k in kwargs if k not in accepted]:
                # a key the constructor does not take, where the configuration object the
                # repo's tests build takes it (input_size, made small): into that object
                holder = next((k for k, v in kwargs.items() if isinstance(v, ObjectArg) and k in accepted and v.accepts(key)), None)
                if holder is not None:
                    kwargs[holder] = kwargs[holder].with_kwargs(**{key: kwargs.pop(key)})
                elif specs:  # keys the constructor does not take belong to its configuration object
                    specs[0].values[key] = kwargs.pop(key)
                elif key in self.spec["kwargs"]:  # --kwargs go to the builds that take them
                    kwargs.pop(key)
        first: Optional[BaseException] = None
        for _ in range(12 + MAX_CHOICES):
            torch.manual_seed(0)
            call = {k: (Config(v.values, lambda key, k=k: self.fill(key, filled, defaults=defaults.get(k, ({}, "")))) if isinstance(v, ConfigSpec)
                        else self.part(v, torch, filled) if isinstance(v, ModuleArg) else v.make() if isinstance(v, ObjectArg) else v)
                    for k, v in kwargs.items()}
            try:
                return ctor(**call)
            except MissingArgs:
                raise
            except Exception as exc:  # noqa: BLE001 -- the user's code may raise anything
                names = self._missing_names(exc, kwargs)
                if names is None:
                    # a value taken from the repo's choices (model_name="hiera_tiny_224") the
                    # constructor rejects: the next one, else the first error
                    first = first or exc
                    if self.next_choice(kwargs, filled) is None:
                        raise first from None
                    continue
            for n in names:
                kwargs[n] = self.fill(n, filled, ctor=ctor)
        raise RuntimeError("could not fill the required arguments")

    @staticmethod
    def _missing_names(exc: BaseException, kwargs: Dict[str, Any]) -> Optional[List[str]]:
        """The arguments a constructor's error says it lacks (a TypeError "missing ...
        required", a KeyError of a key nobody gave), else None."""
        if isinstance(exc, TypeError):
            m = re.search(r"missing \d+ required (?:positional|keyword-only) arguments?: (.*)", str(exc))
            return re.findall(r"'([^']+)'", m.group(1)) if m else None
        if isinstance(exc, KeyError):
            key = exc.args[0] if exc.args else None
            return [key] if isinstance(key, str) and key not in kwargs else None
        return None

    def part(self, arg: ModuleArg, torch, filled: Dict[str, Any]):
        """The model a :class:`ModuleArg` stands for, from this side's copy of its module:
        the first time (original side) built in its mode, at the smallest input size its
        mask units accept, and the keyword arguments that rebuild it recorded; after
        that (the rewritten side, eval mode) built again from those."""
        if arg.kwargs is not None:
            return self.construct(self.ctor_of(arg.mode, torch), dict(arg.kwargs), torch, {})
        model, kwargs = self.build(arg.mode, torch, filled)
        if "input_size" not in self.spec["kwargs"] and not self.spec["input_shape"]:
            model, _ = self.smaller_input(model, kwargs, arg.mode, torch, filled)
        arg.kwargs, arg.size = kwargs, self.own_size(model, kwargs, torch, self.class_defaults(model, arg.mode))
        return model

    def smaller_input(self, model, kwargs: Dict[str, Any], mode: Dict[str, Any], torch, filled: Dict[str, Any]):
        """(the model built again for the smallest input its mask units accept, or as it
        was; the TypeError of a constructor that takes no ``input_size``, or None).
        ``kwargs`` gets the size it was built for."""
        defaults = self.class_defaults(model, mode)
        small = self.small_input_size(model, kwargs, torch, defaults)
        own = self.own_size(model, kwargs, torch, defaults)
        if small is None or own is None or small == own:
            return model, None
        try:
            model = self.construct(self.ctor_of(mode, torch), dict(kwargs, input_size=tuple(small)), torch, filled)
        except TypeError as exc:
            return model, exc
        kwargs["input_size"] = tuple(small)
        return model, None

    @staticmethod
    def shrink(params: Dict[str, Any], given: Dict[str, Any], user: Dict[str, Any]) -> Dict[str, Any]:
        """Small dims for a Hiera-like configuration (the same code paths, fewer FLOPs);
        what the user gave is kept."""
        eff = {k: v for k, v in params.items() if v is not NO_DEFAULT}
        eff.update(given)
        out: Dict[str, Any] = {}

        def num(key) -> Optional[int]:
            v = eff.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        heads = num("num_heads") or 1
        if num("embed_dim") is not None and num("embed_dim") > 8 * heads:
            out["embed_dim"] = 8 * heads
        knobs = sorted((k for k in eff if is_depth_knob(k)), key=lambda k: k != "stages")
        for key in knobs:  # blocks per stage: stages first, then decoder_stages, depths, ...
            value = eff[key]
            if (
                isinstance(value, (tuple, list)) and value
                and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
                and max(value) > 1
            ):
                out[key] = type(value)(1 for _ in value)
        for key in knobs:  # decoder_depth, pixel_decoder_depth, ...
            if key.lower().endswith("decoder_depth") and (num(key) or 0) > 1:
                out[key] = 1
        dheads = num("decoder_num_heads") or 1
        if num("decoder_embed_dim") is not None and num("decoder_embed_dim") > 8 * dheads:
            out["decoder_embed_dim"] = 8 * dheads
        if (num("num_classes") or 0) > 10:
            out["num_classes"] = 10
        if (num("depth") or 0) > 2:
            out["depth"] = 2
        return {k: v for k, v in out.items() if k in params and k not in user}

    @staticmethod
    def checkpoints_off(params: Dict[str, Any], given: Dict[str, Any]) -> Dict[str, Any]:
        """A constructor argument that loads weights (``pretrained=True``,
        ``checkpoint="ckpt/mae.pth"``: a file verify does not have, and weights it does not
        need, since both sides share theirs) is turned off: False for a bool, "" for a
        path string, None for another path; what the user or the factory gave is kept."""
        out: Dict[str, Any] = {}
        for name, default in params.items():
            low = name.lower()
            if name in given or default is NO_DEFAULT or not any(w in low for w in _CHECKPOINT_WORDS):
                continue
            if default is True:
                out[name] = False
            elif isinstance(default, str) and default:
                out[name] = ""
            elif isinstance(default, os.PathLike):
                out[name] = None
        return out

    def _ctor_of_cand(self, cand: Dict[str, Any]) -> Any:
        """What a candidate is built with: its factory, else its class."""
        if cand.get("factory"):
            try:
                return self.resolve(cand["module"], cand["attr"])
            except Exception:  # noqa: BLE001
                pass
        return cand.get("cls")

    def namespace_for(self, cand: Dict[str, Any]) -> Optional[Tuple["Namespace", Dict[str, str], List[str]]]:
        """(the run, {keyword: key}, keys read) whose arguments a factory handing its
        ``**kwargs`` on to its model (:func:`passthrough`) is called with: the first of the
        repo's runs (:class:`Namespace`: its scripts' command lines, then its configs) that
        gives, itself, a key the factory reads or the model takes, and has every key the
        factory reads (from its argparse defaults too) -- one naming the factory
        (``--model hbehavemae``) before the others, and among those the one with the
        smallest input (``input_size``; then in file order); None where the factory is no
        such one."""
        if not cand.get("factory") or cand.get("cls") is None:
            return None
        try:
            found = passthrough(self.resolve(cand["module"], cand["attr"]))
        except Exception:  # noqa: BLE001
            return None
        if found is None:
            return None
        handed, reads = found
        self.repo()
        params = init_params(cand["cls"])[0]
        runs = [ns for ns in self._namespaces if all(k in ns.values for k in reads) and any(k in ns.given for k in [*reads, *params])]
        named = [ns for ns in runs if any(v == cand["attr"] for k, v in ns.values.items() if k in ns.given and isinstance(v, str))]
        run = min(named or runs, key=_input_cost, default=None)  # the smallest input first (stable: file order)
        return None if run is None else (run, handed, reads)

    def modes(self, cand: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The ways to build a candidate, smallest first."""
        user = dict(self.spec["kwargs"], **cand.get("kwargs", {}))
        if cand["cls"] is None:  # --factory: as given
            return [{"module": cand["module"], "attr": cand["attr"], "kwargs": user, "how": "as given"}]
        params, required = init_params(cand["cls"])
        direct = {"module": cand["cls"].__module__, "attr": cand["cls"].__qualname__}
        out = []
        given = dict(cand["recipe"], **user)
        computed: Dict[str, Any] = {}
        # a factory called with a run's whole argparse namespace (**vars(args)) that hands it
        # on to its model: the model's arguments are that run's -- one consistent
        # configuration (strides, patch kernel, input size of one script), not the class's
        # defaults nor values gathered name by name from different scripts
        run = self.namespace_for(cand)
        if run is not None:
            ns, handed, reads = run
            for key, value in ns.values.items():
                if key in params and key not in cand["recipe"] and key not in user:
                    # a string the script parses itself later ("5,1,1;1,3,1"): what it stands for
                    given[key] = as_sequence(key, value, params[key])
            for key, read in handed.items():
                if given.get(key) is OPAQUE and read in ns.values and key not in user:
                    given[key] = computed[key] = as_sequence(key, ns.values[read], params.get(key, NO_DEFAULT))
                    self.origin[key] = ns.origin.get(read, ns.where)
        for key, value in list(given.items()):
            if value is OPAQUE:  # the factory computes it: as if missing (fill), else the default
                try:
                    value = self.fill(key, {}, params.get(key, NO_DEFAULT), ctor=self._ctor_of_cand(cand))
                except MissingArgs:
                    value = params[key] if params.get(key, NO_DEFAULT) is not NO_DEFAULT else None
                if value is not None:
                    given[key] = computed[key] = value
        off = self.checkpoints_off(params, given)
        given.update(off)
        if not cand["opaque"] and not any(v is OPAQUE for v in given.values()):
            small = self.shrink(params, given, user)
            widths = {k: v for k, v in small.items() if not is_depth_knob(k)}
            shown = {k: f"{k}={v}" for k, v in small.items()}
            shown_widths = dict(shown)
            # a configuration object the repo's tests build (config=HieraConfig(embed_dim=96,
            # ...)): its own sizes made small the same way
            for key, value in given.items():
                if isinstance(value, ObjectArg) and key not in user:
                    inner = self.shrink(value.params(), value.kwargs, {})
                    if inner:
                        small[key] = value.with_kwargs(**inner)
                        shown[key] = ", ".join(f"{key}.{k}={v}" for k, v in inner.items())
                        inner_widths = {k: v for k, v in inner.items() if not is_depth_knob(k)}
                        if inner_widths:
                            widths[key] = value.with_kwargs(**inner_widths)
                            shown_widths[key] = ", ".join(f"{key}.{k}={v}" for k, v in inner_widths.items())
            if small:
                out.append(dict(direct, kwargs=dict(given, **small), filled=computed, how="small: " + ", ".join(shown.values())))
                # where the small build raises in the original (a fork indexing its stage
                # list or its blocks by position, a decoder taking stage outputs by index):
                # shrink less -- the same stages and blocks, small widths; then that at the
                # model's own input size; then its configuration
                how = "small widths: " + ", ".join(shown_widths[k] for k in widths)
                if widths and widths != small:
                    out.append(dict(direct, kwargs=dict(given, **widths), filled=computed, how=how))
                if widths:
                    out.append(dict(direct, kwargs=dict(given, **widths), filled=computed, how=f"{how}, at its own input size", own_input=True))
            out.append(dict(direct, kwargs=given, filled=computed, how="its configuration"))
        if off:
            for mode in out:
                mode["how"] += ", no checkpoint: " + ", ".join(f"{k}={v!r}" for k, v in off.items())
        # a required argument annotated with a model class of the files (encoder: Hiera) that
        # no call site gives: that class, as it is built as a model
        for name in sorted(required - set(given)):
            ann = module_annotation(cand["cls"], name)
            first = self._first_cands.get(ann) if ann is not None else None
            if first is not None and first["cls"] is not cand["cls"]:
                given[name] = ModuleArg(first)
        # an argument that is itself a model of the files (encoder=Hiera(...) at a call
        # site): built the way the models are, small first, in each of these modes
        for key, value in given.items():
            if not isinstance(value, ModuleArg):
                continue
            if len(self._inner) >= 3 or value.cand["cls"] in self._inner:  # a cycle: left to fill
                for mode in out:
                    mode["kwargs"].pop(key, None)
            else:
                self._inner.append(value.cand["cls"])
                try:
                    inner = self.modes(value.cand)
                finally:
                    self._inner.pop()
                for i, mode in enumerate(out):
                    pick = inner[min(i, len(inner) - 1)]
                    mode["kwargs"] = dict(mode["kwargs"], **{key: ModuleArg(value.cand, pick)})
                    mode["how"] += f", {key}={value.cand['module']}:{value.cand['attr']} ({pick['how']})"
        if run is not None:
            for mode in out:
                mode["how"] += f", the arguments of {run[0].where}"
        if cand["factory"]:
            factory_kwargs = dict(user)
            how = "the factory"
            if run is not None:  # called as the run calls it: its keys the factory reads or its model takes
                ns = run[0]
                factory_kwargs = dict({k: v for k, v in ns.values.items() if k in run[2] or (k in params and k not in cand["recipe"])}, **user)
                how += f" with the arguments of {ns.where}"
            out.append({"module": cand["module"], "attr": cand["attr"], "kwargs": factory_kwargs, "how": how})
        for mode in out:
            mode["required"] = sorted(required - set(mode["kwargs"])) if mode["attr"] == direct["attr"] else []
        return out

    def component_modes(self, cand: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The ways to build a component, each its own case: as each place of the files
        constructs it (the rest: its defaults, required ones from their names), then the
        first of those with the branches its defaults switch off switched on (a bool
        default negated, a stride/window/unit size of 0 or 1 made 2)."""
        cls = cand["cls"]
        params, required = init_params(cls)
        try:
            annotations = {p.name: p.annotation for p in inspect.signature(cls).parameters.values()}
        except (TypeError, ValueError):
            annotations = {}
        user = {k: v for k, v in self.spec["kwargs"].items() if k in params}
        direct = {"module": cls.__module__, "attr": cls.__qualname__}
        out: List[Dict[str, Any]] = []
        for where, recipe in cand["recipes"] or [("", {})]:
            kwargs, filled = dict(recipe, **user), {}
            for name in [n for n in params if n in required and n not in kwargs]:
                try:
                    value = self.fill(name, filled)
                except MissingArgs:
                    continue  # build() asks again and reports it
                if annotations.get(name) in (int, "int") and isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
                    value = math.prod(value)  # a flattened stride/size (upstream's q_stride=4 for 2x2)
                kwargs[name] = filled[name] = value
            out.append(dict(direct, kwargs=kwargs, filled=filled, how=f"the call in {where}" if where else "its defaults"))
        on: Dict[str, Any] = {}
        for name, default in params.items():
            if name in out[0]["kwargs"]:
                continue
            if isinstance(default, bool):
                on[name] = not default
            elif isinstance(default, int) and default in (0, 1) and any(w in name.lower() for w in BRANCH_KNOBS):
                on[name] = 2
        if on:
            out.append(dict(out[0], kwargs=dict(out[0]["kwargs"], **on), how=out[0]["how"] + ", branches on: " + ", ".join(f"{k}={v!r}" for k, v in on.items())))
        for mode in out:
            mode["required"] = sorted(required - set(mode["kwargs"]))
            shown = ", ".join(f"{k}={getattr(v, '__name__', None) or repr(v)}" for k, v in sorted(mode["kwargs"].items(), key=lambda kv: list(params).index(kv[0]) if kv[0] in params else len(params)))
            mode["label"] = f"component {cls.__name__}({shown})"
        return out

    def ctor_of(self, entry: Dict[str, Any], torch):
        """What builds a mode's or plan's model: its class or factory, or for a module-level
        function (``tensors``: its tensor arguments) a module calling it."""
        ctor = self.resolve(entry["module"], entry["attr"])
        if entry.get("tensors"):
            ctor = function_call(torch, ctor, entry["tensors"])
        return ctor

    def build(self, mode: Dict[str, Any], torch, filled: Dict[str, Any]):
        kwargs = dict(mode["kwargs"])
        filled.update(mode.get("filled", {}))
        ctor = self.ctor_of(mode, torch)
        configs = set(config_params(ctor))
        for name in mode.get("required", []):
            if name not in configs:
                kwargs[name] = self.fill(name, filled, ctor=ctor)
        return self.construct(ctor, kwargs, torch, filled), kwargs

    def class_defaults(self, model, mode: Dict[str, Any]) -> Dict[str, Any]:
        """The constructor defaults of the model's class where the class itself built it
        (what it took for every argument the build did not give); {} for a factory's."""
        try:
            if self.resolve(mode["module"], mode["attr"]) is not type(model):
                return {}
        except Exception:  # noqa: BLE001
            return {}
        return {k: v for k, v in init_params(type(model))[0].items() if v is not NO_DEFAULT}

    def plan_mode(self, cand: Dict[str, Any], mode: Dict[str, Any], torch) -> Dict[str, Any]:
        """Original side: build, shrink the input, the input shapes to try."""
        filled: Dict[str, Any] = {}
        model, kwargs = self.build(mode, torch, filled)
        defaults = self.class_defaults(model, mode)
        user_sized = "input_size" in self.spec["kwargs"] or "input_size" in cand.get("kwargs", {})
        if not user_sized and not self.spec["input_shape"] and not mode.get("own_input"):
            model, exc = self.smaller_input(model, kwargs, mode, torch, filled)
            if exc is not None:
                self.report["notes"].append(f"{cand['label']}: cannot shrink input_size ({exc}); verifying at full size (slow)")
        fallbacks: List[List[int]] = []
        if mode.get("tensors"):  # a function: the token shapes its arguments suggest
            shapes = model.verify_input_shapes()
        elif self.spec["input_shape"]:
            shapes = [list(self.spec["input_shape"])]
        else:
            size = self.own_size(model, kwargs, torch, defaults)
            if not size:  # a wrapper of a model it was given (encoder=): that model's size
                size = next((v.size for v in kwargs.values() if isinstance(v, ModuleArg) and v.size), None)
            if size:
                shapes = [[2, self.in_chans(model, torch), *[int(s) for s in size]]]
            else:
                shapes = self.token_shapes(model, torch, self.small_input_size(model, kwargs, torch, defaults))
            if not shapes:
                raise ValueError("cannot tell the model's input size; give --input-shape or --kwargs '{\"input_size\": ...}'")
            if size or isinstance(next((m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm, torch.nn.modules.conv._ConvNd))), None), torch.nn.modules.conv._ConvNd):
                fallbacks = self.other_ranks(shapes)  # a fork taking (B, T, C), or no channel dim
            if mode.get("widen"):  # a switch reading features stacked on the last dim: x[..., F:2 * F]
                wide = [[*s[:-1], s[-1] * k] for k in (2, 3) for s in [*shapes, *fallbacks]]
                fallbacks = fallbacks + [s for s in wide if s not in shapes and s not in fallbacks]
        notes = [f"built from {mode['how']}"]
        named = {k: v for k, v in filled.items() if self.origin.get(k) is None}
        if named:
            notes.append(f"filled from names: {', '.join(f'{k}={v!r}' for k, v in named.items())}")
        found = {k: v for k, v in filled.items() if self.origin.get(k) is not None}
        if found:
            notes.append(f"filled from the repo: {', '.join(f'{k}={v!r} ({self.origin[k]})' for k, v in found.items())}")
        return {"module": mode["module"], "attr": mode["attr"], "tensors": mode.get("tensors"), "kwargs": kwargs, "shapes": shapes, "fallbacks": fallbacks, "model": model, "notes": notes}
