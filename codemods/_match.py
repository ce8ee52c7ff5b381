"""Matchers: the shape of one statement or expression (a single assignment, a method
call, int arguments, a max reduction), and the code of a node on one line, for the
templates a rewrite emits.  What a function's names do, statement to statement, is
hiera_rewrite.flow's (through ``ctx.flow``).
"""

from __future__ import annotations

from typing import FrozenSet, List, Optional, Tuple

import libcst as cst


def exact_types(*kinds: type) -> FrozenSet[type]:
    """``kinds`` and every class deriving from them, for `type(node) in ...`: that test is
    then `isinstance(node, kinds)` without its cost (libcst's node classes are ABCs, so
    each isinstance of one is a Python-level call).  libcst defines its node classes on
    import, and the concrete ones have no subclasses."""
    found = set()
    todo = list(kinds)
    while todo:
        kind = todo.pop()
        if kind not in found:
            found.add(kind)
            todo.extend(kind.__subclasses__())
    return frozenset(found)


# -- statements ---------------------------------------------------------------------


def single_assign(line: cst.SimpleStatementLine) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of a line holding exactly one plain or annotated assignment."""
    if len(line.body) != 1:
        return None
    small = line.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target, small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return small.target, small.value
    return None


def target_code(line: cst.SimpleStatementLine) -> str:
    """The ``target =`` or ``target: annotation =`` part of a single assignment."""
    small = line.body[0]
    if isinstance(small, cst.AnnAssign):
        return f"{code(small.target)}: {code(small.annotation.annotation)} ="
    assert isinstance(small, cst.Assign)
    return f"{code(small.targets[0].target)} ="


# -- expressions --------------------------------------------------------------------


class _OneLine(cst.CSTTransformer):
    """Drop line breaks and comments inside an expression, so it can be re-wrapped."""

    def leave_ParenthesizedWhitespace(self, original_node, updated_node):
        return cst.SimpleWhitespace(" ")

    def leave_SimpleWhitespace(self, original_node, updated_node):
        if "\\" in updated_node.value or "\n" in updated_node.value:
            return cst.SimpleWhitespace(" ")
        return updated_node

    def leave_TrailingWhitespace(self, original_node, updated_node):
        return updated_node.with_changes(comment=None)


_EMPTY = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    """Source of ``node`` on one line (black re-wraps what we emit); a statement's
    comment lines above it are not part of it."""
    if getattr(node, "leading_lines", None):
        node = node.with_changes(leading_lines=[])
    text = _EMPTY.code_for_node(node)
    if not any(c in text for c in "\n\r\\#"):
        return text.strip()  # no line break, continuation or comment: nothing to drop
    return _EMPTY.code_for_node(node.visit(_OneLine())).strip()


class _NoMagicComma(cst.CSTTransformer):
    """Drop a trailing comma after the last call argument (black's "magic" comma)."""

    def leave_Call(self, original_node, updated_node):
        if updated_node.args and updated_node.args[-1].comma is not cst.MaybeSentinel.DEFAULT:
            args = list(updated_node.args)
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(args=args)
        return updated_node


def rewrap_code(node: cst.CSTNode) -> str:
    """Like :func:`code`, and without magic trailing commas, so black may join lines."""
    return code(node.visit(_NoMagicComma()))


def same_code(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return code(a).replace(" ", "") == code(b).replace(" ", "")


def int_value(node: Optional[cst.BaseExpression]) -> Optional[int]:
    """The value of an int literal, allowing a unary minus and parentheses."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_value(node.expression)
        return None if inner is None else -inner
    return None


def method_call(node: cst.CSTNode, *names: str) -> Optional[Tuple[cst.BaseExpression, cst.Call]]:
    """If ``node`` is ``<receiver>.<name>(...)``, return (receiver, call)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node.func.value, node
    return None


def keeps_dtype(call: cst.Call) -> bool:
    """``call`` (a ``.view(...)``/``.reshape(...)``) rearranges elements and keeps the
    dtype: a reshape, or a view whose arguments are dims (two or more, or one int,
    tuple, list, `*shape`, `x.shape`, `x.size()`).  `x.view(torch.uint8)` reinterprets
    the bytes (a bool mask's True becomes 1 of a uint8, its `~` 254): not such a view."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value not in ("view", "reshape"):
        return False
    if func.attr.value == "reshape" or len(call.args) > 1:
        return all(a.keyword is None for a in call.args)
    if len(call.args) != 1 or call.args[0].keyword is not None:
        return False
    arg = call.args[0]
    value = arg.value
    return bool(arg.star) or isinstance(value, (cst.Integer, cst.UnaryOperation, cst.Tuple, cst.List, cst.BinaryOperation)) or (
        isinstance(value, cst.Attribute) and value.attr.value == "shape"
    ) or (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "size")


def positional(call: cst.Call) -> Optional[List[cst.BaseExpression]]:
    """Positional args, with one tuple/list argument expanded (``view((a, b))``)."""
    if any(a.keyword is not None or a.star for a in call.args):
        return None
    values = [a.value for a in call.args]
    if len(values) == 1 and isinstance(values[0], (cst.Tuple, cst.List)):
        elements = values[0].elements
        if any(isinstance(e, cst.StarredElement) for e in elements):
            return None
        return [e.value for e in elements]
    return values


def int_args(call: cst.Call) -> Optional[List[int]]:
    values = positional(call)
    if values is None:
        return None
    ints = [int_value(v) for v in values]
    return None if any(i is None for i in ints) else ints  # type: ignore[return-value]


def dim_arg(call: cst.Call, name: str = "dim") -> Tuple[bool, Optional[int]]:
    """(ok, dim) for a reduction call taking only a dim (positional or keyword)."""
    if len(call.args) != 1:
        return False, None
    arg = call.args[0]
    if arg.star or (arg.keyword is not None and arg.keyword.value != name):
        return False, None
    return True, int_value(arg.value)


def is_name(node: Optional[cst.CSTNode], value: Optional[str] = None) -> bool:
    return isinstance(node, cst.Name) and (value is None or node.value == value)


def flatten_targets(target: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The targets an assignment target stands for (through tuples, lists, starred)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [t for e in target.elements for t in flatten_targets(e.value)]
    if isinstance(target, cst.StarredElement):
        return flatten_targets(target.value)
    return [target]


def may_setattr(node: cst.CSTNode, attr: str) -> bool:
    """``node`` is a `setattr(obj, name, value)`, or a call of some `__setattr__`
    (`type.__setattr__(cls, name, value)`, `obj.__setattr__(name, value)`), that may set
    ``attr``: no string literal where the name goes names another attribute."""
    if not isinstance(node, cst.Call):
        return False
    if is_name(node.func, "setattr"):
        names = node.args[1:2]
    elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "__setattr__":
        names = node.args[:2]  # unbound (type.__setattr__(cls, name, v)) or bound (obj.__setattr__(name, v))
    else:
        return False
    strings = [a.value for a in names if isinstance(a.value, cst.SimpleString)]
    return not strings or any(s.evaluated_value == attr for s in strings)


def reduction_values(node: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression, int]]:
    """Match ``X.max(dim=k).values`` / ``X.max(k)[0]`` / ``X.amax(dim=k)``.

    Returns (spelling, X, k) where spelling is "max" or "amax".
    """
    if isinstance(node, cst.Attribute) and node.attr.value == "values":
        return _reduction(node.value, "max")  # type: ignore[attr-defined]
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and int_value(index.value) == 0:
            return _reduction(node.value, "max")
        return None
    return _reduction(node, "amax")


def _reduction(node: cst.BaseExpression, spelling: str) -> Optional[Tuple[str, cst.BaseExpression, int]]:
    """``X.<spelling>(dim=k)`` with an int k: (spelling, X, k)."""
    found = method_call(node, spelling)
    if found:
        ok, dim = dim_arg(found[1])
        if ok and dim is not None:
            return spelling, found[0], dim
    return None
