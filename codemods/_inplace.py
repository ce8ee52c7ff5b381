"""Can an in-place operation reach a tensor before backward?  (HR002's proof.)

``.max(dim).values`` saves only its int64 indices for backward; ``.amax(dim)`` saves
its input *and* its output.  After the rewrite, an in-place op on either one (or on
anything sharing its storage: a view, the tensor it is a view of, a sibling from the
same ``unbind``) before backward raises "one of the variables needed for gradient
computation has been modified by an inplace operation", where the original ran.

This module follows a value through one function, statement by statement, in
execution order (branches merged, loops iterated to a fixed point, a name that is
assigned something else is no longer followed), through the expressions that may
return it or share its storage (views, ``.to``/``.contiguous``/``.detach``, indexing,
containers, ``a if c else b``), and reports:

- a *hazard*: an in-place op on it (``x += ...``, ``x[...] = ...``, ``x.mul_(...)``,
  ``torch.relu_(x)``, ``out=x``, ``inplace=True``), or a place where code we cannot
  see may do one (passed to a function or module that is not known to leave it
  alone, stored on an attribute, captured by a nested function, read inside a
  comprehension);
- whether it is *returned* (or yielded) from the function.

For a tensor that exists before the statement (HR002's pooled input), ``kept`` lists,
in any order, what in the function may keep it (any hazard but an in-place op there
and then), and ``held_elsewhere`` where it may come from a value other code holds too.

Known to leave their arguments alone: ``torch.*`` functions (except ``*_``, those
given ``inplace=``/``out=`` and those that run a function they are given, such as
``torch.utils.checkpoint.checkpoint``), a few builtins, ``self.m`` where every ``self.m = ...`` of
the class builds a ``torch.nn`` module without ``inplace=True`` (or timm's DropPath),
and functions defined at module level in the same file whose body is followed too.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from hiera_rewrite.flow import body_of, bound_parameter, declared_names, enclosing_function, is_inplace_function, is_inplace_method, loaded_names, subtree
from hiera_rewrite.rewrite import PlanContext

from ._calls import _STORES_AND_CALLS, FORWARD_HOOKS, _kin, nodes_of, subclasses_in, walk

# the hooks that see what a module returns (a pre-hook sees its input only)
POST_HOOKS = frozenset(h for h in FORWARD_HOOKS if "pre_hook" not in h)
from ._match import code, flatten_targets, is_name, may_setattr, single_assign

TENSOR = "tensor"
CONTAINER = "container"  # a tuple/list/... that may hold it (binary ops keep it: `t + (y,)`)

# Tensor methods whose result may share storage with the receiver (or be it).
ALIAS_METHODS = frozenset(
    """view view_as reshape reshape_as transpose permute flatten unflatten squeeze
    unsqueeze expand expand_as narrow select t movedim moveaxis swapaxes swapdims
    contiguous to type type_as float double half bfloat16 cuda cpu detach as_strided
    diagonal unfold view_as_real view_as_complex align_to rename refine_names
    __getitem__ numpy untyped_storage storage""".split()
)
CONTAINER_METHODS = frozenset("unbind split chunk tensor_split hsplit vsplit dsplit split_with_sizes unsafe_split unsafe_chunk unsafe_split_with_sizes".split())
ALIAS_ATTRS = frozenset("T mT H mH data real imag".split())
# torch.<name>(x, ...) that may return x or a view of it
VIEW_FUNCTIONS = frozenset(
    """transpose reshape flatten unflatten squeeze unsqueeze narrow select permute
    movedim moveaxis swapaxes swapdims t detach as_strided diagonal view_as_real
    view_as_complex real imag broadcast_to atleast_1d atleast_2d atleast_3d
    dropout alpha_dropout feature_alpha_dropout dropout1d dropout2d dropout3d
    view view_as expand expand_as contiguous""".split()
)
# Tensor methods and torch functions known to return a new tensor (or a number): what
# any other returns may be the tensor itself or a view of it (`ravel`, `torch.as_tensor`)
NEW_RESULTS = frozenset("""add sub mul div true_divide floor_divide remainder fmod pow matmul mm bmm baddbmm addmm
    einsum softmax log_softmax sigmoid tanh relu gelu silu elu leaky_relu hardtanh exp log log1p
    expm1 sqrt rsqrt abs neg reciprocal sin cos clamp clip sum mean std var norm amax amin max min
    argmax argmin argsort sort topk cumsum cumprod prod any all logical_not logical_and logical_or
    eq ne lt le gt ge isnan isinf isfinite where masked_fill index_select gather scatter scatter_add
    index_add index_copy index_fill masked_select nonzero clone repeat repeat_interleave tile roll
    flip rot90 cat concat concatenate stack hstack vstack zeros_like ones_like empty_like full_like
    rand_like randn_like linear layer_norm group_norm batch_norm instance_norm conv1d conv2d conv3d
    interpolate pad scaled_dot_product_attention lerp addcmul addcdiv round floor ceil trunc sign
    item tolist size dim numel stride element_size nelement data_ptr is_contiguous""".split())
# torch functions that call a function they are given (on their other arguments):
# `checkpoint(self.block, x)` runs the fork's own code on x
CALLING_FUNCTIONS = (
    "torch.utils.checkpoint.", "torch.func.", "torch.vmap", "torch.cond", "torch.while_loop",
    "torch.autograd.functional.", "torch.nn.utils.stateless.", "torch._higher_order_ops.", "torch.compile",
    "torch.jit.", "torch.compiler.", "torch.autograd.Function",
)
CONTAINER_FUNCTIONS = frozenset("unbind split chunk tensor_split hsplit vsplit dsplit broadcast_tensors unsafe_split unsafe_chunk unsafe_split_with_sizes".split())
# torch.nn modules that may return their input itself
ALIAS_MODULES = frozenset("Identity Dropout Dropout1d Dropout2d Dropout3d AlphaDropout FeatureAlphaDropout Flatten Unflatten".split())
# modules outside torch.nn known to leave their input alone (and that may return it)
KNOWN_MODULES = frozenset({"timm.layers.DropPath", "timm.models.layers.DropPath", "timm.layers.drop.DropPath"})
SAFE_BUILTINS = frozenset("len isinstance issubclass print repr str id type hash bool int float format callable hasattr".split())
CONTAINER_BUILTINS = frozenset("tuple list iter reversed zip enumerate set frozenset sorted dict".split())
LIST_MUTATORS = frozenset("append extend insert".split())  # `outs.append(x)`: outs now holds x
# methods that put their argument into the container they are called on
CONTAINER_MUTATORS = LIST_MUTATORS | frozenset("update setdefault add __setitem__ appendleft extendleft put put_nowait".split())
# `other.<method>(x)` with one of these tensor methods reads x (and returns a new
# tensor, or other itself): a method of another tensor taking it as an operand
TENSOR_ARG_METHODS = frozenset(
    """add sub mul div true_divide floor_divide remainder fmod pow matmul mm bmm
    maximum minimum fmax fmin where masked_fill masked_scatter lerp addcmul addcdiv
    addmm baddbmm eq ne lt le gt ge equal allclose isclose dot inner outer cross
    logical_and logical_or logical_xor bitwise_and bitwise_or atan2 hypot
    scatter scatter_add index_add index_copy index_fill gather expand_as view_as
    reshape_as type_as new_empty new_zeros new_ones new_full copysign""".split()
)

State = Dict[str, str]

# Hazard texts name the followed value as WHAT; the caller substitutes its role
# ("the pooled tensor", "the tensor it pools (`x`)").
WHAT = "{what}"


@dataclasses.dataclass
class Effect:
    hazard: Optional[str] = None
    binds: Dict[str, str] = dataclasses.field(default_factory=dict)
    returned: bool = False
    inplace: bool = False  # the hazard is an in-place op, there and then (it keeps no reference)


@dataclasses.dataclass
class _Verdict:
    hazard: Optional[str] = None
    kind: Optional[str] = None  # the result may be (a view of) the argument
    holder: Optional[str] = None  # `holder.append(arg)`: holder now holds it
    inplace: bool = False  # the hazard is an in-place op by torch, there and then


@dataclasses.dataclass
class Outcome:
    hazards: List[str]
    returned: bool


class _Unfollowed(Exception):
    """The function's shape is beyond what is followed (reason)."""


class InplaceFlow:
    """Follows values through the functions of one module (one per plan)."""

    def __init__(self, ctx: PlanContext) -> None:
        self.ctx = ctx
        self._summaries: Dict[Tuple[int, str], Optional[Outcome]] = {}
        self._modules: Dict[Tuple[int, str, bool], Optional[str]] = {}
        self._returns: Dict[int, Tuple[cst.FunctionDef, Optional[bool]]] = {}
        self._memo: Dict[Tuple[str, int], Tuple[cst.FunctionDef, List[Tuple[cst.Name, Effect]]]] = {}
        self._module_functions: Optional[Dict[str, Optional[cst.FunctionDef]]] = None
        self._module_bound: Optional[Dict[str, int]] = None
        self._hooks: Dict[frozenset, bool] = {}
        self._private_memo: Dict[Tuple[str, int, str], Tuple[cst.FunctionDef, bool]] = {}
        self._siblings: Dict[int, "InplaceFlow"] = {}

    # -- public ---------------------------------------------------------------------
    def follow(self, func: cst.FunctionDef, stmt: cst.CSTNode, seed_nodes: Sequence[cst.CSTNode] = (), seed_names: Sequence[str] = ()) -> Outcome:
        """Follow, from the statement ``stmt`` of ``func`` on, the value of each seed
        expression node (created by ``stmt`` itself) and of each seed name (its value
        just before ``stmt`` runs)."""
        runner = _Runner(self, func, stmt, list(seed_nodes), {n: TENSOR for n in seed_names})
        return runner.run()

    def storage_names(self, func: cst.FunctionDef, root: str) -> Set[str]:
        """Names of ``func`` that may share storage with ``root`` somewhere in it
        (flow-insensitive: a name one of them is viewed into, or viewed out of)."""
        group = {root}
        links = [{name.value, *effect.binds} for name, effect in self._uses(func)]
        links += [names for names, _ in self._shared_bindings(func)]
        changed = True
        while changed:
            changed = False
            for linked in links:
                if linked & group and not linked <= group:
                    group |= linked
                    changed = True
        return group

    def _shared_bindings(self, func: cst.FunctionDef) -> List[Tuple[Set[str], Optional[str]]]:
        """The statements of ``func`` that bind one value to several targets at once:
        an assignment with more than one target (`h = self.skip = v`, `h = g = v`), a
        walrus (`self.skip = (h := v)`, `self.bufs.append(h := v)`): the names bound
        to it, and the first hazard of the other targets or of the walrus's context
        (a store, a call that may keep it), which a use of the names does not show."""
        key = ("shared", id(func))
        found = self._memo.get(key)
        if found is None or found[0] is not func:
            shared: List[Tuple[Set[str], Optional[str]]] = []
            for node in walk(func.body):
                if _in_nested_scope(self.ctx, node, func):
                    continue
                if isinstance(node, cst.Assign) and len(node.targets) > 1:
                    names: Set[str] = set()
                    hazard: Optional[str] = None
                    for t in node.targets:
                        names |= _names_bound(t.target)
                        store = self._store(t.target)
                        if store is not None and hazard is None:
                            hazard = f"{WHAT} is stored in `{_short(store)}` at line {self._line(node)}, where other code may modify it in place"
                    shared.append((names, hazard))
                elif isinstance(node, cst.NamedExpr) and isinstance(node.target, cst.Name):
                    effect = self.classify(node, TENSOR)
                    hazard = effect.hazard if not effect.inplace else None
                    shared.append(({node.target.value, *effect.binds}, hazard))
            found = self._memo[key] = (func, shared)  # type: ignore[assignment]
        return found[1]  # type: ignore[return-value]

    def kept(self, func: cst.FunctionDef, names: Set[str]) -> List[str]:
        """Where one of ``names`` may be kept anywhere in ``func``, in any order (code
        outside the function may then modify it at any time): every hazard of its uses
        but an in-place op there and then.  A store (an attribute, a container others
        reach), and anything that may store it: a call not known to leave it alone (a
        method of self, `setattr`, a function of the file that may keep or modify it,
        any unknown one), a closure, a use that is not followed."""
        return [effect.hazard for name, effect in self._uses(func) if name.value in names and effect.hazard is not None and not effect.inplace]

    def _uses(self, func: cst.FunctionDef) -> List[Tuple[cst.Name, Effect]]:
        key = ("uses", id(func))
        found = self._memo.get(key)
        if found is None or found[0] is not func:
            uses: List[Tuple[cst.Name, Effect]] = []
            for part in _parts(func.body):
                for name in loaded_names(self.ctx, part):
                    if _in_nested_scope(self.ctx, name, part):
                        continue
                    uses.append((name, self.classify(name, TENSOR)))
            found = self._memo[key] = (func, uses)
        return found[1]

    def param_for(self, func: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.BaseExpression]:
        """The argument a call passes for ``param`` (None: not passed or not plain)."""
        for arg in call.args:
            if bound_parameter(func, call, arg) == param:
                return arg.value
        return None

    # -- one occurrence -------------------------------------------------------------
    def classify(self, node: cst.CSTNode, kind: str) -> Effect:
        """What happens to the value of ``node`` (a name load or the seed expression)
        in its statement."""
        ctx = self.ctx
        cur: cst.CSTNode = node
        label = WHAT
        effect = Effect()
        while True:
            p = ctx.parent(cur)
            if p is None:
                effect.hazard = f"{label} is used where HR002 does not follow it"
                return effect
            if isinstance(p, cst.Attribute) and p.value is cur:
                gp = ctx.parent(p)
                if isinstance(gp, cst.Call) and gp.func is p:
                    method = p.attr.value
                    if is_inplace_method(method):
                        effect.hazard = f"`{_short(p.value)}.{method}(...)` at line {self._line(gp)} modifies {WHAT} in place"
                        effect.inplace = True
                        return effect
                    if method in ALIAS_METHODS:
                        cur = gp
                        continue
                    if method in CONTAINER_METHODS:
                        cur, kind = gp, CONTAINER
                        continue
                    if method in NEW_RESULTS or _is_self(p.value):
                        return effect  # a new tensor (or a number); `self.<m>(...)`: its own method's
                    cur = gp  # not known to make a new tensor: may return it (`ravel`, `resolve_conj`)
                    continue
                if p.attr.value in ALIAS_ATTRS:
                    if _is_target(ctx, p):
                        effect.hazard = f"`{_short(p)} = ...` at line {self._line(p)} modifies {WHAT} in place"
                        effect.inplace = True
                        return effect
                    cur = p
                    continue
                return effect  # .shape, .dtype, .device, .grad ...
            if isinstance(p, cst.Subscript) and p.value is cur:
                if _is_target(ctx, p):
                    effect.hazard = f"`{_short(p)} = ...` at line {self._line(p)} modifies {WHAT} in place"
                    effect.inplace = True
                    return effect
                aug = ctx.parent(p)
                if isinstance(aug, cst.AugAssign) and aug.target is p:
                    effect.hazard = f"`{_short(p)} {_op(aug)}= ...` at line {self._line(p)} modifies {WHAT} in place"
                    effect.inplace = True
                    return effect
                cur, kind = p, TENSOR
                continue
            if isinstance(p, (cst.Index, cst.Slice, cst.SubscriptElement)):
                # used as an index: `a[x]` copies out of a; but `D[x] = v` keeps x as a
                # key of D (a dict others reach keeps it)
                sub = next((a for a in ctx.ancestors(p) if isinstance(a, cst.Subscript)), None)
                if sub is not None and self._written_item(sub) and self._escapes(sub.value):
                    effect.hazard = f"{label} is used as a key of `{_short(sub.value)}` at line {self._line(sub)}, where other code may modify it in place"
                return effect
            if isinstance(p, cst.Arg):
                call = ctx.parent(p)
                if not isinstance(call, cst.Call):
                    effect.hazard = f"{label} is used where HR002 does not follow it (line {self._line(p)})"
                    return effect
                verdict = self._call(call, p, kind)
                if verdict.hazard is not None:
                    effect.hazard, effect.inplace = verdict.hazard, verdict.inplace
                    return effect
                if verdict.holder is not None:
                    effect.binds[verdict.holder] = CONTAINER
                    return effect
                if verdict.kind is None:
                    return effect
                cur, kind = call, verdict.kind
                continue
            if isinstance(p, cst.Call) and p.func is cur:
                return effect
            if isinstance(p, cst.BinaryOperation):
                if kind == CONTAINER:
                    cur = p
                    continue
                return effect
            if isinstance(p, cst.UnaryOperation) and isinstance(p.operator, cst.Plus):
                cur = p  # `+x` is x
                continue
            if isinstance(p, (cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget, cst.FormattedStringExpression)):
                return effect
            if isinstance(p, cst.BooleanOperation):
                cur = p
                continue
            if isinstance(p, cst.IfExp):
                if p.test is cur:
                    return effect
                cur = p
                continue
            if isinstance(p, (cst.Element, cst.StarredElement, cst.DictElement, cst.StarredDictElement)):
                cur, kind = p, CONTAINER
                continue
            if isinstance(p, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
                cur, kind = p, CONTAINER
                continue
            if isinstance(p, cst.NamedExpr):
                if p.value is cur:
                    effect.binds.update(_target_names(p.target, kind))
                    cur = p
                    continue
                return effect
            if isinstance(p, cst.Await):
                cur = p
                continue
            if isinstance(p, (cst.Yield, cst.From)):
                effect.returned = True
                return effect
            if isinstance(p, (cst.CompFor, cst.CompIf, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                effect.hazard = f"{label} is read inside a comprehension at line {self._line(p)} (not followed)"
                return effect
            if isinstance(p, cst.Lambda):
                effect.hazard = f"{label} is captured by a lambda at line {self._line(p)}"
                return effect
            # -- statement level ---------------------------------------------------
            if isinstance(p, cst.AssignTarget):
                return effect  # `a[x] = ...` handled above; a plain target is no use
            if isinstance(p, (cst.Assign, cst.AnnAssign)):
                if p.value is not cur:
                    return effect
                targets = [t.target for t in p.targets] if isinstance(p, cst.Assign) else [p.target]
                for target in targets:
                    store = self._store(target)
                    if store is not None:
                        effect.hazard = f"{label} is stored in `{_short(store)}` at line {self._line(p)}, where other code may modify it in place"
                        return effect
                    effect.binds.update(_target_names(target, kind))
                return effect
            if isinstance(p, cst.AugAssign):
                if p.target is cur:
                    effect.hazard = f"`{_short(cur)} {_op(p)}= ...` at line {self._line(p)} modifies {WHAT} in place"
                    effect.inplace = True
                    return effect
                if kind == CONTAINER:
                    if not isinstance(p.target, cst.Name) or self._escapes(p.target):
                        effect.hazard = f"{label} is stored in `{_short(p.target)}` at line {self._line(p)}, where other code may modify it in place"
                        return effect
                    effect.binds.update(_target_names(p.target, CONTAINER))
                return effect
            if isinstance(p, cst.Return):
                effect.returned = True
                return effect
            if isinstance(p, cst.For):
                if p.iter is cur:
                    store = _attribute_or_item(p.target)
                    if store is not None:  # `for self.last in [x]`, `for c[k] in [x]`
                        effect.hazard = f"{label} is stored in `{_short(store)}` at line {self._line(p)}, where other code may modify it in place"
                        return effect
                    effect.binds.update(_target_names(p.target, TENSOR))
                return effect
            if isinstance(p, cst.WithItem):
                if p.item is cur and p.asname is not None:
                    store = _attribute_or_item(p.asname.name)
                    if store is not None:
                        effect.hazard = f"{label} is stored in `{_short(store)}` at line {self._line(p)}, where other code may modify it in place"
                        return effect
                    effect.binds.update(_target_names(p.asname.name, kind))
                return effect
            if isinstance(p, cst.Match):
                if p.subject is cur and any(_captures(case.pattern) for case in p.cases):
                    # `case (True, out):` binds it (or a part of it) to a name not followed
                    effect.hazard = f"{label} is matched by the `match` at line {self._line(p)}, whose captures HR002 does not follow"
                return effect
            if isinstance(p, (cst.Expr, cst.If, cst.While, cst.Assert, cst.Raise, cst.Del)):
                return effect
            if isinstance(p, (cst.Param, cst.Parameters, cst.Decorator)):
                effect.hazard = f"{label} is captured by a definition at line {self._line(p)}"
                return effect
            effect.hazard = f"{label} is used in a `{type(p).__name__}` at line {self._line(p)}, which HR002 does not follow"
            return effect

    def _written_item(self, sub: cst.Subscript) -> bool:
        """`sub` (`D[k]`) is stored to: an assignment, augmented assignment, loop or
        with target, or inside a tuple or list target."""
        return _binding_of(self.ctx, sub) is not None

    def _store(self, target: cst.BaseExpression) -> Optional[cst.CSTNode]:
        """The part of an assignment target that stores the value where other code may
        reach it: an attribute, an item of a container that escapes (`self.cache[k]`,
        `FEATURES[i]`, `record["maps"][k]`), or any attribute or item a tuple or list
        target unpacks into (`self.last, n = x, w`); None for names and items of the
        function's own containers (`outs[0] = x`)."""
        if isinstance(target, cst.Subscript):
            return target if self._escapes(target.value) else None
        return _attribute_or_item(target)

    def _escapes(self, container: cst.CSTNode) -> bool:
        """Whether the container ``container`` (what `container[k] = x`,
        `container.append(x)` or `container += [x]` puts a value in) may be reached by
        code outside the function.  The function's own is a name that is no parameter,
        not declared global or nonlocal, every binding of which makes a new container
        (`outs = []`, `list(...)`; `cache = self.cache` is another name for one others
        reach), and that the function uses only to read, store and delete its items
        and call its mutators (see _private): `self.maps = maps`, `FEATS.append(maps)`,
        `return maps`, a closure, make it reachable whenever the value goes in.  Not a
        name (`self.cache`, `record["maps"]`: the item may be a container others reach,
        `{"maps": self.maps}`): it escapes."""
        func = enclosing_function(self.ctx, container)
        if not isinstance(container, cst.Name) or container.value == "self" or func is None:
            return True
        name = container.value
        flow = self.ctx.flow(func)
        if name in flow.params or name in declared_names(self.ctx, func) or flow.compound_assigned.get(name):
            return True
        made = flow.assigning(name)
        if not made or not all(_new_container(st.line, name) for st in made):
            return True
        for st in made:  # `list(...)` is the builtin
            value = single_assign(st.line)[1]  # type: ignore[index]
            if isinstance(value, cst.Call) and self._module_binds(value.func.value):  # type: ignore[attr-defined]
                return True
        return not self._private(func, name)

    def _private(self, func: cst.FunctionDef, name: str) -> bool:
        """``func`` uses the variable ``name`` only as `name[...]` (read, stored, deleted,
        augmented) and `name.<mutator>(...)` (CONTAINER_MUTATORS), besides binding and
        deleting it, and no nested scope names it: no other code can reach the
        container it holds."""
        key = ("private", id(func), name)
        found = self._private_memo.get(key)
        if found is None or found[0] is not func:
            found = self._private_memo[key] = (func, self._only_items(func, name))
        return found[1]

    def _only_items(self, func: cst.FunctionDef, name: str) -> bool:
        ctx = self.ctx
        names: List[cst.Name] = []

        class _Names(cst.CSTVisitor):
            def visit_Name(self, node: cst.Name) -> None:
                if node.value == name:
                    names.append(node)

        ctx.visit(_Names(), func.body)
        for node in names:
            p = ctx.parent(node)
            if isinstance(p, cst.Attribute) and p.attr is node or isinstance(p, cst.Arg) and p.keyword is node:
                continue  # `x.name`, `f(name=...)`: not the variable
            if _in_nested_scope(ctx, node, func):
                return False
            if not _is_load(ctx, node):
                continue  # a binding (each checked by _escapes) or `del name`
            if isinstance(p, cst.Subscript) and p.value is node:
                continue
            if isinstance(p, cst.Attribute) and p.value is node and p.attr.value in CONTAINER_MUTATORS:
                call = ctx.parent(p)
                if isinstance(call, cst.Call) and call.func is p:
                    continue
            if isinstance(p, cst.AugAssign) and p.target is node:
                continue  # `outs += [x]`
            return False
        return True

    # -- calls ----------------------------------------------------------------------
    def _call(self, call: cst.Call, arg: cst.Arg, kind: str) -> "_Verdict":
        """What a call does with one of its arguments."""
        verdict = self._call_kind(call, arg, kind)
        if isinstance(verdict, _Verdict):
            return verdict
        if verdict is None or verdict in (TENSOR, CONTAINER):
            return _Verdict(kind=verdict)
        return _Verdict(hazard=verdict)

    def _call_kind(self, call: cst.Call, arg: cst.Arg, kind: str) -> "_Verdict | Optional[str]":
        """A hazard text, None (left alone, the result is new), the kind of alias the
        result is, or a _Verdict."""
        line = self._line(call)
        callee = _short(call.func)
        func = call.func
        qualified = self.ctx.qualified_names(func)
        torch_only = bool(qualified) and all(q.startswith("torch.") for q in qualified)
        # torch writing its input or `out=` keeps no reference to it (a function of the
        # fork's own given `inplace=`/`out=` may)
        written = torch_only and not any(q.startswith(CALLING_FUNCTIONS) for q in qualified) and (
            arg.keyword is not None and arg.keyword.value == "out" or arg is _first_positional(call)
        )
        if arg.keyword is not None and arg.keyword.value == "out" and (torch_only or not qualified and not isinstance(func, cst.Name)):
            # torch's `out=` (or a method's, which may be a tensor's); `dict(out=x)` is
            # no write: what a call of another kind does with it is found below
            return _Verdict(hazard=f"`{callee}(..., out=...)` at line {line} writes {WHAT} in place", inplace=written)
        if inplace_given(call, qualified):
            return _Verdict(hazard=f"`{callee}(..., inplace=...)` at line {line} modifies {WHAT} in place", inplace=written)
        if torch_only:
            if any(q.startswith(CALLING_FUNCTIONS) for q in qualified):
                return f"{WHAT} is passed to `{callee}(...)` at line {line}, which runs code it is given on it"
            if any(is_inplace_function(q) for q in qualified):
                return _Verdict(hazard=f"`{callee}(...)` at line {line} modifies {WHAT} in place", inplace=written)
            last = {q.rsplit(".", 1)[-1] for q in qualified}
            if last & CONTAINER_FUNCTIONS:
                return CONTAINER
            if last & NEW_RESULTS and not any(q.startswith("torch.Tensor.") for q in qualified):
                return None
            # a view, or not known to make a new tensor (`torch.as_tensor(x)` is x)
            return TENSOR if kind == TENSOR else CONTAINER
        if isinstance(func, cst.Attribute) and func.attr.value in CONTAINER_MUTATORS and not qualified:
            if self._escapes(func.value):
                # `self.feats.append(x)`, `FEATURES.append(x)`, `self.cache.update(k=x)`
                return _Verdict(hazard=f"{WHAT} is stored by `{callee}(...)` at line {line}, where other code may modify it in place")
            if func.attr.value in LIST_MUTATORS and isinstance(func.value, cst.Name):
                # `outs.append(x)`: follow `outs` as a container holding it
                return _Verdict(holder=func.value.value)
        if isinstance(func, cst.Attribute) and not qualified and not _is_self_attr(func) and not _is_self(func.value):
            method = func.attr.value
            if (is_inplace_method(method) and not method.startswith("__") and method != "set_") or method in TENSOR_ARG_METHODS:
                # `out.add_(x)`, `a.matmul(x)`: another tensor's method reads it (a
                # dunder's may keep it: `h.__setitem__(0, x)` on a list, `__setattr__`;
                # `a.set_(x)` makes a share x's storage)
                return None
        if isinstance(func, cst.Name) and not qualified:
            if func.value in SAFE_BUILTINS and not self._module_binds(func.value):
                return None
            if func.value in CONTAINER_BUILTINS and not self._module_binds(func.value):
                return CONTAINER
            target = self._module_function(func.value, call)
            if target is not None:
                summary = self._summary(target, call, arg)
                if isinstance(summary, str):
                    return summary
                return (TENSOR if kind == TENSOR else CONTAINER) if summary else None
        if _is_self_attr(func):
            module = self._self_module(call, func.attr.value)  # type: ignore[union-attr]
            if module == "alias":
                return TENSOR if kind == TENSOR else CONTAINER
            if module == "new":
                return None
        return f"{WHAT} is passed to `{callee}(...)` at line {line}, which may modify it in place"

    def _summary(self, func: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> "str | bool":
        """Hazard text, or whether the call may return (an alias of) the argument."""
        param = bound_parameter(func, call, arg)
        if param is None:
            return f"{WHAT} is passed to `{func.name.value}(...)` at line {self._line(call)} in a way HR002 does not follow"
        key = (id(func), param)
        if key in self._summaries:
            found = self._summaries[key]
            if found is None:
                return f"{WHAT} is passed to the recursive `{func.name.value}(...)` at line {self._line(call)}"
        else:
            self._summaries[key] = None
            found = _Runner(self, func, None, [], {param: TENSOR}).run()
            self._summaries[key] = found
        if found.hazards:
            return f"{WHAT} is passed to `{func.name.value}(...)` at line {self._line(call)}, where " + found.hazards[0].replace(WHAT, "it")
        return found.returned

    def _module_function(self, name: str, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The module-level ``def name`` a bare call resolves to, if it surely does."""
        if self._module_functions is None:
            defs: Dict[str, Optional[cst.FunctionDef]] = {}
            for stmt in self.ctx.module.body:
                if isinstance(stmt, cst.FunctionDef):
                    defs[stmt.name.value] = None if stmt.name.value in defs else stmt
            self._module_functions = defs
        func = self._module_functions.get(name)
        if func is None or func.decorators:
            return None
        # not rebound anywhere else (another def, an assignment, an import, a parameter)
        return func if self._bindings().get(name, 0) == 1 else None

    def _bindings(self) -> Dict[str, int]:
        """How many times the module binds each name (any scope)."""
        if self._module_bound is None:
            counts: Dict[str, int] = {}
            for n in self.ctx.nodes(cst.Name):
                if not _is_load(self.ctx, n):  # type: ignore[arg-type]
                    counts[n.value] = counts.get(n.value, 0) + 1  # type: ignore[attr-defined]
            self._module_bound = counts
        return self._module_bound

    def _module_binds(self, name: str) -> bool:
        return name in self._bindings()

    def held_elsewhere(self, func: cst.FunctionDef, names: Set[str]) -> Optional[str]:
        """Where a name of ``names`` (a storage group, see storage_names) gets a value
        that other code may hold too: a global, an attribute or an item of one
        (`h = self.cache["h"]`), what a loop or `with` header binds (`for h in
        self.feats`), the result of a call not known to make a new tensor it does not
        keep (`h = self.make(x)`, a function of the file).  Parameters are the callers'
        (not checked here)."""
        fflow = self.ctx.flow(func)
        for bound, hazard in self._shared_bindings(func):
            if hazard is not None and bound & names:
                return hazard
        for name in sorted(names):
            if fflow.compound_assigned.get(name):
                return f"{WHAT} (as `{name}`) is bound by a compound statement's header (`for`, `with`, `except`) from a value other code may hold too"
            made = fflow.assigning(name)
            if name in declared_names(self.ctx, func) or not made and name not in fflow.params:
                return f"{WHAT} is the global `{name}`, where other code may modify it in place"
            for st in made:
                for value in _values_bound(self.ctx, st.line, name):
                    if value is None:
                        return f"{WHAT} (as `{name}`) is bound at line {self._line(st.line) if st.line.body else self._line(func)} in a way HR002 does not follow"
                    holder = self._holder(value)
                    if holder is not None:
                        return f"{WHAT} comes from `{_short(holder)}` at line {self._line(holder)} (bound to `{name}`), which other code may hold too"
        return None

    def view_names(self, expr: cst.BaseExpression) -> Tuple[Optional[str], List[str]]:
        """(where the value of ``expr`` may be held by other code too, as value_held;
        the local names whose storage it may share: `h` of `torch.flatten(h)`)."""
        names: List[str] = []
        holder = self._holder(expr, names)
        if holder is not None:
            return f"{WHAT} comes from `{_short(holder)}` at line {self._line(holder)}, which other code may hold too", names
        return None, names

    def sibling_flow(self, ctx: PlanContext) -> "InplaceFlow":
        """The InplaceFlow of another module's context (one per module and plan)."""
        if ctx is self.ctx:
            return self
        found = self._siblings.get(id(ctx))
        if found is None or found.ctx is not ctx:
            found = self._siblings[id(ctx)] = InplaceFlow(ctx)
        return found

    def value_held(self, expr: cst.BaseExpression) -> Optional[str]:
        """Where the value of ``expr`` (or what it is a view of) may be held by other
        code too (see held_elsewhere); None where it is new or a view of a name."""
        holder = self._holder(expr)
        if holder is None:
            return None
        return f"{WHAT} comes from `{_short(holder)}` at line {self._line(holder)}, which other code may hold too"

    def _holder(self, expr: cst.BaseExpression, names: Optional[List[str]] = None) -> Optional[cst.CSTNode]:
        """The part of ``expr`` other code may hold, where ``expr``'s value is it or
        a view of it; None where its value is new or a view of a local name (added
        to ``names``)."""
        pending: List[cst.BaseExpression] = [expr]
        while pending:
            e = pending.pop()
            if isinstance(e, cst.Name) and names is not None:
                names.append(e.value)
            if isinstance(e, (cst.Name, cst.BaseNumber, cst.BaseString, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
                continue  # a name: its own bindings are checked
            if isinstance(e, cst.Attribute):
                if e.attr.value in ALIAS_ATTRS:
                    pending.append(e.value)
                    continue
                if e.attr.value in ("values", "indices") and isinstance(e.value, cst.Call) and isinstance(e.value.func, cst.Attribute) and e.value.func.attr.value in NEW_RESULTS:
                    continue  # `t.max(dim=1).values`
                return e
            if isinstance(e, cst.Subscript):
                pending.append(e.value)
            elif isinstance(e, (cst.Tuple, cst.List)):
                pending.extend(el.value for el in e.elements)
            elif isinstance(e, cst.IfExp):
                pending += [e.body, e.orelse]
            elif isinstance(e, cst.BooleanOperation):
                pending += [e.left, e.right]
            elif isinstance(e, cst.Call):
                if not self._makes_new(e, pending):
                    return e
            else:
                return e
        return None

    def _makes_new(self, call: cst.Call, pending: List[cst.BaseExpression]) -> bool:
        """The call makes a new value no other code holds (True), or a view of its
        receiver or arguments (True, with them added to ``pending``); False when it is
        not known not to keep what it returns."""
        func = call.func
        qualified = self.ctx.qualified_names(func)
        args = [a.value for a in call.args]
        if qualified and all(q.startswith("torch.") for q in qualified):
            if any(q.startswith(CALLING_FUNCTIONS) for q in qualified):
                return False
            last = {q.rsplit(".", 1)[-1] for q in qualified}
            if not (last & NEW_RESULTS and not any(q.startswith("torch.Tensor.") for q in qualified)):
                pending.extend(args)
            return True
        if _is_self_attr(func):
            module = self._self_module(call, func.attr.value, output=True)  # type: ignore[union-attr]
            if module == "alias":
                pending.extend(args)
            return module in ("new", "alias")
        if isinstance(func, cst.Attribute) and not qualified and not _is_self(func.value):
            method = func.attr.value
            if method in ALIAS_METHODS or method in CONTAINER_METHODS:
                pending.append(func.value)
                return True
            return method in NEW_RESULTS
        if isinstance(func, cst.Name) and not qualified:
            target = self._module_function(func.value, call)
            if target is not None:
                return self._returns_new(target)
            if not self._module_binds(func.value):
                if func.value in CONTAINER_BUILTINS:
                    pending.extend(args)
                    return True
                return func.value in SAFE_BUILTINS
        return False

    def _returns_new(self, func: cst.FunctionDef) -> bool:
        """Every value the module-level ``func`` returns is new and no other code holds
        it: made by its return statement (`return x.view(...).max(dim=1).values`), or
        a local name made so and kept nowhere; and it is no generator."""
        found = self._returns.get(id(func))
        if found is not None and found[0] is func:
            return bool(found[1])  # None while it is being checked: recursive
        self._returns[id(func)] = (func, None)
        ok = True
        names: List[str] = []
        nested = False
        pending: List[cst.CSTNode] = list(body_of(func.body))
        while pending and ok:
            node = pending.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                nested = True
                continue
            if isinstance(node, (cst.Yield, cst.Await)):
                ok = False
            elif isinstance(node, cst.Return) and node.value is not None:
                ok = self._holder(node.value, names) is None
            pending.extend(node.children)
        if ok and names:
            # `pooled = ...; return pooled`: made in the function, kept nowhere, not
            # an argument (no nested scope that may keep it unseen)
            group = set().union(*(self.storage_names(func, n) for n in names))
            ok = not nested and not group & self.ctx.flow(func).params and not self.kept(func, group) and self.held_elsewhere(func, group) is None
        self._returns[id(func)] = (func, ok)
        return ok

    def calls_of(self, func: cst.FunctionDef) -> Optional[List[cst.Call]]:
        """Every call of the module-level ``func`` in this file; None where its name
        is also used otherwise (passed as a value, rebound)."""
        name = func.name.value
        if self._module_function(name, None) is not func:  # type: ignore[arg-type]
            return None
        calls: List[cst.Call] = []
        for n in self.ctx.nodes(cst.Name):
            if n.value != name or not _is_load(self.ctx, n):  # type: ignore[attr-defined,arg-type]
                continue
            p = self.ctx.parent(n)
            if isinstance(p, cst.Attribute) and p.attr is n:
                continue
            if isinstance(p, cst.Arg) and p.keyword is n:
                continue
            if isinstance(p, cst.Call) and p.func is n:
                calls.append(p)
                continue
            return None
        return calls

    def _self_module(self, call: cst.Call, attr: str, output: bool = False) -> Optional[str]:
        """'new' / 'alias' when every ``self.attr = ...`` of the enclosing class builds
        a known module that leaves its input alone; None when unknown."""
        cls = next((a for a in self.ctx.ancestors(call) if isinstance(a, cst.ClassDef)), None)
        if cls is None:
            return None
        key = (id(cls), attr, output)
        if key not in self._modules:
            self._modules[key] = self._class_module(cls, attr, output)
        return self._modules[key]

    def _class_module(self, cls: cst.ClassDef, attr: str, output: bool = False) -> Optional[str]:
        """See _self_module; with ``output``, only whether what it returns is new or
        its input, no other code holding it (a forward pre-hook does not see it)."""
        values: List[cst.BaseExpression] = []
        # a subclass's self.attr may be set by its bases: those defined in this file
        classes = self._class_and_bases(cls)
        if self._hooked(POST_HOOKS if output else FORWARD_HOOKS):
            return None  # a forward (pre-)hook registered in the file may run around any module
        for target in self.ctx.nodes(cst.AssignTarget):
            t = target.target  # type: ignore[attr-defined]
            if isinstance(t, cst.Attribute) and t.attr.value == attr and not (
                _is_self_attr(t) and classes & {id(a) for a in self.ctx.ancestors(target)}
            ):
                # `blk.attn.proj = ...`, or `self.proj = ...` in another class whose instances
                # may run this forward (a subclass, a mixin beside it): another module may run here
                owner = next((a for a in self.ctx.ancestors(target) if isinstance(a, cst.ClassDef)), None)
                if not _is_self_attr(t) or owner is None or self._related(owner, cls):
                    return None
            if _is_self_attr(t) and t.attr.value == attr and classes & {id(a) for a in self.ctx.ancestors(target)}:
                stmt = self.ctx.parent(target)
                if not isinstance(stmt, cst.Assign) or len(stmt.targets) != 1:
                    return None
                values.append(stmt.value)
        for aug in self.ctx.nodes(cst.AugAssign):
            if isinstance(aug.target, cst.Attribute) and aug.target.attr.value == attr:  # type: ignore[attr-defined]
                return None
        if any(may_setattr(call, attr) or _registers_module(call, attr) for call in self.ctx.nodes(cst.Call)):
            return None
        for sub in self.ctx.nodes(cst.Subscript):  # `self._modules["proj"] = ...`
            if isinstance(sub.value, cst.Attribute) and sub.value.attr.value == "_modules" and _is_target(self.ctx, sub):
                return None
        for ann in self.ctx.nodes(cst.AnnAssign):
            if _is_self_attr(ann.target) and ann.target.attr.value == attr:  # type: ignore[attr-defined]
                return None
        if any(_changes_inside(node, attr) for node in nodes_of(self.ctx.module, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del, cst.Call))):
            return None  # `self.proj.forward = f`, `self._modules.update(proj=m)`
        if self._set_beside(cls, attr, POST_HOOKS if output else FORWARD_HOOKS):
            return None
        if not values:
            return None
        verdict = "new"
        pending = list(values)
        while pending:
            value = pending.pop()
            if isinstance(value, cst.IfExp):
                pending += [value.body, value.orelse]
                continue
            if not isinstance(value, cst.Call):
                return None
            qualified = self.ctx.qualified_names(value.func)
            if inplace_given(value, qualified) or any(a.star for a in value.args):
                return None
            if not qualified:
                return None
            for q in qualified:
                if q in KNOWN_MODULES:
                    verdict = "alias"
                elif q.startswith("torch.nn.") and q.count(".") == 2 and q.rsplit(".", 1)[-1][:1].isupper():
                    if q.rsplit(".", 1)[-1] in ALIAS_MODULES:
                        verdict = "alias"
                    if q == "torch.nn.Sequential":
                        # runs the modules it is given (any of them the fork's own), and
                        # returns its input itself when empty
                        verdict = "alias"
                        for a in value.args:
                            if a.keyword is not None or not isinstance(a.value, cst.Call):
                                return None
                            pending.append(a.value)
                else:
                    return None
        return verdict

    def _set_beside(self, cls: cst.ClassDef, attr: str, hooks: frozenset) -> bool:
        """Another module of the file's folder (another file of the run, a script
        importing it) may set ``<x>.attr`` of an instance of ``cls`` or change what it
        runs: it stores into `<x>.attr` other than as `self.attr` of a class unrelated to
        ``cls`` (`blk.attn.proj = ...`, a subclass's `self.proj = ...`), into an attribute
        of it (`<x>.proj.forward = f`), sets it by name (`setattr`, `register_module`,
        `_modules[...]`, `__dict__`), or registers a forward hook.  True also where the
        folder is too large to read; False where it is not known at all (stdin, a reader
        of names only: those modules are not read)."""
        key = ("beside", id(cls), attr, hooks)
        if key in self._modules:
            return bool(self._modules[key])
        modules = self.ctx.modules_beside([attr.encode(), b"hook", b"setattr", b"_modules", b"__dict__", b"vars(", b"add_module", b"register_module"])
        touched = False
        if modules is not None:
            others = [m for m in modules if m is not self.ctx.module]
            # the classes beside whose `self` may be an instance of cls: its subclasses
            # (by name) and their bases; not another module's own class of that name
            subs = {c.name.value for c in subclasses_in([self.ctx.module, *others], cls.name.value)}
            kin = set().union(*(_kin(n, [self.ctx.module, *others]) for n in subs)) - {cls.name.value} if subs else set()
            for module in others:
                for node in nodes_of(module, _STORES_AND_CALLS):  # the only nodes the tests below read
                    on_self = isinstance(node, cst.Call) and (
                        is_name(node.func, "setattr") and bool(node.args) and is_name(node.args[0].value, "self")
                        or isinstance(node.func, cst.Attribute) and is_name(node.func.value, "self")
                    )
                    set_by_name = may_setattr(node, attr) and (not on_self or _in_kin_class(module, node, kin))
                    # `register_module(name, m)` by a computed name: on `self`, only in a class related to
                    # cls; on another object (`self.body.add_module(f"stage{i}", ...)`) out of contract, as
                    # a computed setattr there is
                    registered = isinstance(node, cst.Call) and _registers_module(node, attr) and (
                        isinstance(node.args[0].value, cst.SimpleString)
                        or on_self and _in_kin_class(module, node, kin)
                    )
                    if _changes_inside(node, attr) or set_by_name or registered or isinstance(node, cst.Call) and (
                        isinstance(node.func, cst.Attribute) and node.func.attr.value in hooks
                        or isinstance(node.func, cst.Name) and node.func.value in hooks
                    ):
                        touched = True
                    elif isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
                        for t in flatten_targets(node.target):  # type: ignore[arg-type]
                            if isinstance(t, cst.Attribute) and t.attr.value == attr and (
                                not _is_self_attr(t) or _in_kin_class(module, node, kin)
                            ):
                                touched = True
                    if touched:
                        break
                if touched:
                    break
        elif self.ctx.beside_unread():
            touched = True  # a folder too large to read
        self._modules[key] = "touched" if touched else None
        return touched

    def _related(self, other: cst.ClassDef, cls: cst.ClassDef) -> bool:
        """Some instance may run methods of both ``other`` and ``cls``: a class of this
        file has both among its bases (itself included), or has ``other`` and a base
        named by a module-level name that is not one class statement (an alias)."""
        top = [s for s in self.ctx.module.body if isinstance(s, cst.ClassDef)]
        for klass in top if other in top else [other]:
            family = self._class_and_bases(klass)
            if id(other) not in family:
                continue
            if id(cls) in family or self._unresolved_base(klass):
                return True
        return False

    def _unresolved_base(self, klass: cst.ClassDef) -> bool:
        """``klass`` or an in-file base of it derives from a plain name the module binds
        other than by one class statement (`Attn = MaskUnitAttention`)."""
        names = {s.name.value for s in self.ctx.module.body if isinstance(s, cst.ClassDef)}
        family = self._class_and_bases(klass)
        for stmt in self.ctx.module.body:
            if isinstance(stmt, cst.ClassDef) and id(stmt) in family:
                for base in stmt.bases:
                    if isinstance(base.value, cst.Name) and (base.value.value not in names or self._module_binds_other(base.value.value)) and self._bindings().get(base.value.value, 0):
                        return True
        return False

    def _hooked(self, hooks: frozenset = FORWARD_HOOKS) -> bool:
        """The file registers a forward hook or pre-hook (on a module, or globally):
        code that may run around any submodule call and write its input in place
        (``hooks``: of these registrations only)."""
        if hooks not in self._hooks:
            self._hooks[hooks] = any(
                isinstance(call.func, cst.Attribute) and call.func.attr.value in hooks
                or isinstance(call.func, cst.Name) and call.func.value in hooks
                for call in self.ctx.nodes(cst.Call)  # type: ignore[union-attr]
            )
        return self._hooks[hooks]

    def _class_and_bases(self, cls: cst.ClassDef) -> Set[int]:
        """ids of ``cls`` and of its bases (transitively) that are classes of this file,
        named by a plain name bound once at module level."""
        top = {}
        for stmt in self.ctx.module.body:
            if isinstance(stmt, cst.ClassDef):
                top.setdefault(stmt.name.value, []).append(stmt)
        found: Set[int] = set()
        pending = [cls]
        while pending:
            current = pending.pop()
            if id(current) in found:
                continue
            found.add(id(current))
            for base in current.bases:
                if isinstance(base.value, cst.Name) and len(top.get(base.value.value, [])) == 1:
                    if not self._module_binds_other(base.value.value):
                        pending.append(top[base.value.value][0])
        return found

    def _module_binds_other(self, name: str) -> bool:
        """``name`` is bound at module level by something besides its class statement."""
        return self._bindings().get(name, 0) > 1

    def _line(self, node: cst.CSTNode) -> int:
        return self.ctx.position(node).line


class _Runner:
    """One pass over a function body in execution order."""

    MAX_ROUNDS = 8

    def __init__(self, flow: InplaceFlow, func: cst.FunctionDef, stmt: Optional[cst.CSTNode], seed_nodes: List[cst.CSTNode], seed_names: State) -> None:
        self.flow = flow
        self.func = func
        self.stmt = stmt  # a small or compound statement; None: the seeds hold at entry
        self.seed_nodes = seed_nodes
        self.seed_names = seed_names
        self.hazards: List[str] = []
        self.returned = False
        self.loops: List[Tuple[List[State], List[State]]] = []
        self.ever: Set[str] = set()
        self.nested: List[Tuple[cst.CSTNode, Set[str]]] = []
        self.declared: Set[str] = set()  # names the function declares global/nonlocal

    def run(self) -> Outcome:
        start: State = dict(self.seed_names) if self.stmt is None else {}
        try:
            self.block(body_of(self.func.body), start)
        except _Unfollowed as exc:
            self.hazard(str(exc))
        for node, names in self.nested:
            captured = sorted(names & self.ever)
            if captured:
                self.hazard(f"{WHAT} (as `{captured[0]}`) is read by the nested `{node.name.value}` defined at line {self.flow._line(node)}")  # type: ignore[attr-defined]
        return Outcome(self.hazards, self.returned)

    def hazard(self, text: str) -> None:
        if text not in self.hazards:
            self.hazards.append(text)

    # -- statements -----------------------------------------------------------------
    def block(self, stmts: Sequence[cst.BaseStatement], state: Optional[State], collect: Optional[List[State]] = None) -> Optional[State]:
        for stmt in stmts:
            if state is None:
                return None
            state = self.statement(stmt, state)
            if collect is not None and state is not None:
                collect.append(state)
        return state

    def statement(self, stmt: cst.BaseStatement, state: State) -> Optional[State]:
        if stmt is self.stmt:
            state = _merge(state, self.seed_names) or {}
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                state = self.small(small, state, stmt)
                if state is None:
                    return None
            return state
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            self.nested.append((stmt, {n.value for n in loaded_names(self.flow.ctx, stmt)}))
            state = dict(state)
            state.pop(stmt.name.value, None)
            return state
        if isinstance(stmt, cst.If):
            binds = self.header(stmt.test, state)
            state = _merge(state, binds) or {}
            then = self.block(body_of(stmt.body), dict(state))
            other: Optional[State] = dict(state)
            if isinstance(stmt.orelse, cst.If):
                other = self.statement(stmt.orelse, dict(state))
            elif isinstance(stmt.orelse, cst.Else):
                other = self.block(body_of(stmt.orelse.body), dict(state))
            return _merge(then, other)
        if isinstance(stmt, (cst.For, cst.While)):
            return self.loop(stmt, state)
        if isinstance(stmt, (cst.Try, cst.TryStar)):
            seen: List[State] = [state]
            end = self.block(body_of(stmt.body), dict(state), seen)
            handler_start = _merge_all(seen)
            ends = []
            for handler in stmt.handlers:
                s = dict(handler_start)
                if handler.type is not None:
                    s = _merge(s, self.header(handler.type, s)) or {}
                if handler.name is not None:
                    s.pop(getattr(handler.name.name, "value", ""), None)
                ends.append(self.block(body_of(handler.body), s))
            if stmt.orelse is not None and end is not None:
                end = self.block(body_of(stmt.orelse.body), end)
            ends.append(end)
            result = _merge_all([e for e in ends if e is not None]) if any(e is not None for e in ends) else None
            if stmt.finalbody is not None:
                fin_start = _merge_all([handler_start] + [e for e in ends if e is not None])
                fin = self.block(body_of(stmt.finalbody.body), fin_start)
                if fin is None:
                    return None
                result = None if result is None else _merge(result, fin)
            return result
        if isinstance(stmt, cst.With):
            state = dict(state)
            for item in stmt.items:
                binds = self.header(item.item, state)
                if item.asname is not None:
                    for name in _names_bound(item.asname.name):
                        state.pop(name, None)
                state = _merge(state, binds) or {}
            return self.block(body_of(stmt.body), state)
        if isinstance(stmt, cst.Match):
            state = _merge(state, self.header(stmt.subject, state)) or {}
            ends = [state]
            for case in stmt.cases:
                if case.guard is not None:  # `case True if h.mul_(2) ...:`
                    state = _merge(state, self.header(case.guard, state)) or {}
                e = self.block(body_of(case.body), dict(state))
                if e is not None:
                    ends.append(e)
            return _merge_all(ends)
        raise _Unfollowed(f"a `{type(stmt).__name__}` statement at line {self.flow._line(stmt)} is not followed")

    def loop(self, stmt: "cst.For | cst.While", state: State) -> Optional[State]:
        head = dict(state)
        target_binds: State = {}
        if isinstance(stmt, cst.For):
            target_binds = self.header(stmt.iter, head)
            targets = _names_bound(stmt.target)
        breaks_all: List[State] = []
        for _ in range(self.MAX_ROUNDS):
            continues: List[State] = []
            breaks: List[State] = []
            self.loops.append((continues, breaks))
            s = dict(head)
            if isinstance(stmt, cst.For):
                for name in targets:
                    s.pop(name, None)
                s = _merge(s, target_binds) or {}
            else:
                s = _merge(s, self.header(stmt.test, s)) or {}
            end = self.block(body_of(stmt.body), s)
            self.loops.pop()
            breaks_all += breaks
            new_head = _merge_all([head] + ([end] if end is not None else []) + continues)
            if new_head == head:
                break
            head = new_head
        else:
            raise _Unfollowed(f"the loop at line {self.flow._line(stmt)} is not followed")
        exit_state = head
        if stmt.orelse is not None:
            exit_state = self.block(body_of(stmt.orelse.body), dict(head)) or {}
        return _merge_all([exit_state] + breaks_all)

    def header(self, expr: cst.CSTNode, state: State) -> State:
        """Check a compound statement's header expression; what it binds."""
        binds: State = {}
        for node, kind in self.uses(expr, state):
            effect = self.flow.classify(node, kind)
            self.apply(effect)
            binds.update(effect.binds)
        return binds

    def small(self, small: cst.BaseSmallStatement, state: State, line: cst.SimpleStatementLine) -> Optional[State]:
        if small is self.stmt:
            state = _merge(state, self.seed_names) or {}
        if isinstance(small, (cst.Global, cst.Nonlocal)):
            for n in small.names:
                self.declared.add(n.name.value)
                if n.name.value in state:
                    self.hazard(f"{WHAT} (as `{n.name.value}`) is declared {type(small).__name__.lower()} at line {self.flow._line(small)}")
            return state
        binds: State = {}
        for node, kind in self.uses(small, state):
            effect = self.flow.classify(node, kind)
            self.apply(effect)
            binds.update(effect.binds)
        new = dict(state)
        for name in _bound_names(small):
            new.pop(name, None)
        new = _merge(new, binds) or {}
        for name in sorted(set(binds) & self.declared):
            self.hazard(f"{WHAT} is stored in the global `{name}` at line {self.flow._line(small)}, where other code may modify it in place")
        self.ever |= set(new)
        if isinstance(small, (cst.Return, cst.Raise)):
            return None
        if isinstance(small, (cst.Break, cst.Continue)):
            if self.loops:
                self.loops[-1][1 if isinstance(small, cst.Break) else 0].append(new)
            return None
        return new

    def uses(self, node: cst.CSTNode, state: State) -> List[Tuple[cst.CSTNode, str]]:
        found: List[Tuple[cst.CSTNode, str]] = []
        for seed in self.seed_nodes:
            if _contains(self.flow.ctx, node, seed):
                found.append((seed, TENSOR))
        if state:
            for name in loaded_names(self.flow.ctx, node):
                if name.value in state:
                    found.append((name, state[name.value]))
        return found

    def apply(self, effect: Effect) -> None:
        if effect.hazard is not None:
            self.hazard(effect.hazard)
        if effect.returned:
            self.returned = True


# -- small helpers --------------------------------------------------------------------


def _merge(a: Optional[State], b: Optional[State]) -> Optional[State]:
    if a is None:
        return None if b is None else dict(b)
    if b is None:
        return dict(a)
    out = dict(a)
    for name, kind in b.items():
        out[name] = kind if out.get(name, kind) == kind else CONTAINER
    return out


def _merge_all(states: Sequence[State]) -> State:
    out: State = {}
    for s in states:
        out = _merge(out, s) or {}
    return out


def _parts(suite: cst.BaseSuite) -> List[cst.CSTNode]:
    """Small statements and compound headers of a function body (nested defs excluded)."""
    found: List[cst.CSTNode] = []
    pending: List[cst.CSTNode] = list(body_of(suite))
    while pending:
        stmt = pending.pop(0)
        if isinstance(stmt, cst.SimpleStatementLine):
            found.extend(stmt.body)
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(stmt, cst.If):
            found.append(stmt.test)
            pending.extend(body_of(stmt.body))
            if stmt.orelse is not None:
                pending.append(stmt.orelse if isinstance(stmt.orelse, cst.If) else stmt.orelse.body)  # type: ignore[arg-type]
        elif isinstance(stmt, cst.BaseSuite):
            pending.extend(body_of(stmt))
        elif isinstance(stmt, (cst.For, cst.While)):
            found.append(stmt.iter if isinstance(stmt, cst.For) else stmt.test)
            pending.extend(body_of(stmt.body))
            if stmt.orelse is not None:
                pending.extend(body_of(stmt.orelse.body))
        elif isinstance(stmt, cst.With):
            found.extend(item.item for item in stmt.items)
            pending.extend(body_of(stmt.body))
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            pending.extend(body_of(stmt.body))
            for h in stmt.handlers:
                pending.extend(body_of(h.body))
            if stmt.orelse is not None:
                pending.extend(body_of(stmt.orelse.body))
            if stmt.finalbody is not None:
                pending.extend(body_of(stmt.finalbody.body))
        elif isinstance(stmt, cst.Match):
            found.append(stmt.subject)
            for case in stmt.cases:
                if case.guard is not None:
                    found.append(case.guard)
                pending.extend(body_of(case.body))
    return found


def _in_nested_scope(ctx: PlanContext, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
    for a in ctx.ancestors(node):
        if a is stop:
            return False
        if isinstance(a, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return True
    return False


def _contains(ctx: PlanContext, root: cst.CSTNode, node: cst.CSTNode) -> bool:
    if node is root:
        return True
    return any(a is root for a in ctx.ancestors(node))


_FRESH = (cst.List, cst.Dict, cst.Set, cst.Tuple, cst.ListComp, cst.DictComp, cst.SetComp)


def _new_container(line: cst.SimpleStatementLine, name: str) -> bool:
    """``line`` is `name = <a new list, dict, set or tuple>` (a display, a comprehension,
    or `list(...)`, `dict(...)`, `set(...)`, `tuple(...)`)."""
    assign = single_assign(line)
    if assign is None or not isinstance(assign[0], cst.Name) or assign[0].value != name:
        return False
    value = assign[1]
    if isinstance(value, _FRESH):
        return True
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("list", "dict", "set", "tuple")


def _target_names(target: cst.CSTNode, kind: str) -> State:
    """Names an assignment target binds to (a part of) the value: kind for a plain
    name, a tensor for each name unpacked, a container for `base[...] = value`."""
    if isinstance(target, cst.Name):
        return {target.value: kind}
    if isinstance(target, (cst.Tuple, cst.List)):
        out: State = {}
        for element in target.elements:
            out.update(_target_names(element.value, TENSOR))
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value, CONTAINER)
    if isinstance(target, cst.Subscript):
        base = target.value
        while isinstance(base, (cst.Subscript, cst.Attribute)):
            base = base.value
        return {base.value: CONTAINER} if isinstance(base, cst.Name) else {}
    return {}


def _values_bound(ctx: PlanContext, line: cst.SimpleStatementLine, name: str) -> List[Optional[cst.BaseExpression]]:
    """The values ``line`` binds to ``name`` (assignments and walruses); None for a
    binding of another kind (an import, a nested def's name); `name += ...` and `del
    name` bind no new value."""
    if not line.body:
        return [None]  # a nested def or class of that name
    found: List[Optional[cst.BaseExpression]] = []
    for small in line.body:
        if isinstance(small, cst.Assign) and any(name in _names_bound(t.target) for t in small.targets):
            found.append(small.value)
        elif isinstance(small, cst.AnnAssign) and small.value is not None and name in _names_bound(small.target):
            found.append(small.value)
        elif isinstance(small, (cst.AugAssign, cst.Del)):
            pass
        elif isinstance(small, (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)) and name in _bound_names(small) | {n.name.value for n in getattr(small, "names", ()) if isinstance(n, cst.NameItem)}:
            found.append(None)
        for walrus in subtree(small):
            if isinstance(walrus, cst.NamedExpr) and isinstance(walrus.target, cst.Name) and walrus.target.value == name:
                found.append(walrus.value)
    return found


def _first_positional(call: cst.Call) -> Optional[cst.Arg]:
    first = next((a for a in call.args if a.keyword is None), None)
    return None if first is None or first.star else first


def _attribute_or_item(target: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The first attribute or subscript an assignment target stores into (also inside a
    tuple, list or starred target), or the target itself where it is not a name."""
    if isinstance(target, cst.Name):
        return None
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            found = _attribute_or_item(element.value)
            if found is not None:
                return found
        return None
    if isinstance(target, cst.StarredElement):
        return _attribute_or_item(target.value)
    return target


def _names_bound(target: cst.CSTNode) -> Set[str]:
    """The names an assignment target rebinds (not `base` of `base[k]` or `base.a`)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_names_bound(e.value) for e in target.elements))
    if isinstance(target, cst.StarredElement):
        return _names_bound(target.value)
    return set()


def _bound_names(small: cst.BaseSmallStatement) -> Set[str]:
    """Names a small statement rebinds (so their old value is no longer followed)."""
    names: Set[str] = set()

    def bind(target: cst.CSTNode) -> None:
        names.update(_names_bound(target))

    if isinstance(small, cst.Assign):
        for t in small.targets:
            bind(t.target)
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        bind(small.target)
    elif isinstance(small, cst.Del):
        bind(small.target)
    elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(small, "names", None), cst.ImportStar):
        for alias in small.names:  # type: ignore[union-attr]
            bound = alias.asname.name if alias.asname else alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value
            bind(bound)
    return names


def _is_target(ctx: PlanContext, node: cst.CSTNode) -> bool:
    p = ctx.parent(node)
    return isinstance(p, cst.AssignTarget) and p.target is node


def _is_load(ctx: PlanContext, name: cst.Name) -> bool:
    p = ctx.parent(name)
    if isinstance(p, cst.AssignTarget) and p.target is name:
        return False
    if isinstance(p, (cst.FunctionDef, cst.ClassDef)) and p.name is name:
        return False
    if isinstance(p, cst.Param) and p.name is name:
        return False
    if isinstance(p, (cst.AsName,)):
        return False
    if isinstance(p, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
        return _target_context(ctx, name)
    if isinstance(p, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor)) and getattr(p, "target", None) is name:
        return False
    if isinstance(p, (cst.Global, cst.Nonlocal, cst.NameItem, cst.ImportAlias, cst.Del)):
        return False
    if isinstance(p, cst.Attribute) and p.attr is name:
        return True  # not a variable at all
    if isinstance(p, cst.Arg) and p.keyword is name:
        return True
    return True


def _target_context(ctx: PlanContext, name: cst.CSTNode) -> bool:
    """A name inside a tuple/list: a load unless the tuple is an assignment or loop target."""
    return not isinstance(_binding_of(ctx, name), (cst.AssignTarget, cst.For, cst.CompFor))


def _binding_of(ctx: PlanContext, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The statement part whose target ``node`` is, itself or inside a tuple or list: an
    assignment's, augmented or annotated assignment's, loop's or comprehension's target,
    or a `with ... as` name; else None."""
    for a in ctx.ancestors(node):
        if isinstance(a, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
            node = a
            continue
        if isinstance(a, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)) and a.target is node:
            return a
        if isinstance(a, cst.AsName) and a.name is node:
            return a
        return None
    return None


def _is_self_attr(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


def _is_self(node: cst.CSTNode) -> bool:
    return (isinstance(node, cst.Name) and node.value == "self") or (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "super"
    )


# The position of `inplace` among the positional arguments of torch.nn's modules and
# torch.nn.functional's functions that take it (torch 2.x signatures: `nn.ReLU(True)`,
# `nn.Dropout(p, True)`, `F.relu(x, True)`, `F.dropout(x, p, training, True)`).
INPLACE_MODULE_POSITION = {
    "ReLU": 0, "ReLU6": 0, "SELU": 0, "SiLU": 0, "Mish": 0, "Hardsigmoid": 0, "Hardswish": 0,
    "Dropout": 1, "Dropout1d": 1, "Dropout2d": 1, "Dropout3d": 1, "AlphaDropout": 1, "FeatureAlphaDropout": 1,
    "ELU": 1, "CELU": 1, "LeakyReLU": 1, "Hardtanh": 2, "RReLU": 2, "Threshold": 2,
}
INPLACE_FUNCTION_POSITION = {
    "relu": 1, "relu6": 1, "selu": 1, "silu": 1, "mish": 1, "hardsigmoid": 1, "hardswish": 1,
    "elu": 2, "celu": 2, "leaky_relu": 2, "threshold": 3, "hardtanh": 3, "dropout": 3, "dropout1d": 3,
    "dropout2d": 3, "dropout3d": 3, "alpha_dropout": 3, "feature_alpha_dropout": 3, "rrelu": 4,
}


def inplace_given(call: cst.Call, qualified: Set[str]) -> bool:
    """The call may ask for in-place work: `inplace=` not literally False, or, for a
    torch.nn module or torch.nn.functional function with an `inplace` parameter, a
    positional argument in its place (or *args) not literally False."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "inplace" and not _is_false(arg.value):
            return True
    positional = [a for a in call.args if a.keyword is None]
    for q in qualified:
        owner, _, last = q.rpartition(".")
        if owner == "torch.nn.functional":
            at = INPLACE_FUNCTION_POSITION.get(last)
        elif owner == "torch.nn" or owner.startswith("torch.nn.modules"):
            at = INPLACE_MODULE_POSITION.get(last)
        else:
            continue
        if at is None:
            continue
        if any(a.star for a in positional[: at + 1]):
            return True
        if len(positional) > at and not _is_false(positional[at].value):
            return True
    return False


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def _short(node: cst.CSTNode, limit: int = 40) -> str:
    text = code(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _op(aug: cst.AugAssign) -> str:
    return aug.operator._get_token().rstrip("=")  # type: ignore[attr-defined]


def _registers_module(call: cst.Call, attr: str) -> bool:
    """`x.register_module("proj", m)` / `x.add_module("proj", m)` (or a name not a string)."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in ("register_module", "add_module") and call.args):
        return False
    first = call.args[0].value
    return not isinstance(first, cst.SimpleString) or first.evaluated_value == attr


def _through(expr: cst.BaseExpression, attr: str) -> bool:
    """``expr`` reaches an object through `<...>.attr` (`self.proj`, `blk.attn.proj.fc`)."""
    while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
        if isinstance(expr, cst.Attribute) and expr.attr.value == attr:
            return True
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return False


_MODULES_MUTATORS = frozenset("update setdefault __setitem__ pop popitem clear __delitem__".split())


def _changes_inside(node: cst.CSTNode, attr: str) -> bool:
    """``node`` may change what the submodule ``attr`` runs without storing into
    `<x>.attr` itself: a store into an attribute or item of it (`self.proj.forward = f`,
    `self.proj._forward_hooks[0] = h`), `setattr(self.proj, ...)`, a change of a
    module's `_modules` by a method (`self._modules.update(proj=m)`), or a store through
    `__dict__` / `vars(...)` (an instance attribute hides a submodule)."""
    if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)):
        for t in flatten_targets(node.target):  # type: ignore[arg-type]
            if isinstance(t, (cst.Attribute, cst.Subscript)) and _through(t.value, attr):
                return True
            if isinstance(t, cst.Subscript):
                base = t.value
                if isinstance(base, cst.Attribute) and base.attr.value in ("__dict__", "_modules"):
                    return True
                if isinstance(base, cst.Call) and is_name(base.func, "vars"):
                    return True
        return False
    if isinstance(node, cst.Call):
        func = node.func
        objects: List[cst.BaseExpression] = []
        if is_name(func, "setattr") or is_name(func, "delattr"):
            objects = [a.value for a in node.args[:1]]
        elif isinstance(func, cst.Attribute) and func.attr.value in ("__setattr__", "__delattr__"):
            objects = [func.value, *(a.value for a in node.args[:1])]  # bound, or unbound (`object.__setattr__(m, ...)`)
        if any(_through(o, attr) for o in objects):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in _MODULES_MUTATORS:
            holder = func.value
            if isinstance(holder, cst.Attribute) and holder.attr.value in ("_modules", "__dict__"):
                return True
            if isinstance(holder, cst.Call) and is_name(holder.func, "vars"):
                return True
    return False


def _in_kin_class(module: cst.Module, node: cst.CSTNode, kin: Set[str]) -> bool:
    """``node`` (of ``module``) is inside a class named in ``kin``, or in no class (a
    function may be given any instance)."""
    owner = _owner_class(module, node)
    return owner is None or owner.name.value in kin


def _owner_class(module: cst.Module, node: cst.CSTNode) -> Optional[cst.ClassDef]:
    found: Optional[cst.ClassDef] = None

    def search(current: cst.CSTNode, cls: Optional[cst.ClassDef]) -> bool:
        nonlocal found
        if current is node:
            found = cls
            return True
        here = current if isinstance(current, cst.ClassDef) else cls
        return any(search(child, here) for child in current.children)

    search(module, None)
    return found


def _captures(pattern: cst.MatchPattern) -> bool:
    """A `case` pattern binds a name (`case out:`, `case (True, out):`, `case {**rest}`,
    `case [*xs]`, `case C(a=x)`, `... as y`)."""
    for node in subtree(pattern):
        if isinstance(node, cst.MatchAs) and node.name is not None:
            return True
        if isinstance(node, cst.MatchStar) and node.name is not None:
            return True
        if isinstance(node, cst.MatchMapping) and node.rest is not None:
            return True
    return False
