"""Issue 31, the behaviour-MAE family: what ``--verify`` reads from a repo's shell scripts,
argparse and configs, and the input it builds from that configuration.

The real repos (keypoint MAEs over (frames, individuals, keypoints), one channel) build
their model with ``models_defs.__dict__[args.model](**vars(args))``: a factory reading a
few keys of ``**kwargs`` and handing the rest on to the class, whose own defaults are no
consistent configuration.  The configuration is in the training scripts::

    common_args="--input_size 900 3 24 --q_strides 5,1,1;1,3,1 ..."
    python run_pretrain.py $common_args

parsed by the repo's argparse with its own ``type=`` functions.  Each rule below has a
small synthetic repo imitating that pattern (fixture code written here; the Hiera files
are copies of the installed upstream package, read at test time).
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict

import pytest

from hiera_rewrite.verify.arguments import Namespace, repo_values, script_arguments
from hiera_rewrite.verify.shell import commands


# -- 1. a variable's value never holds operators ----------------------------------------------

COMMON_ARGS_SH = '''\
# number of gpus to use
GPUS=$1

common_args="--dataset mice \\
    --input_size 900 3 24 \\
    --stages 3 4 5 \\
    --q_strides 5,1,1;1,3,1 \\
    --mask_unit_attn True False False \\
    --patch_kernel 3 1 24 \\
    --init_embed_dim 128 \\
    --pin_mem \\
    --output_dir outputs/mice/experiment1"

if [[ $GPUS == 1 ]]; then
    OMP_NUM_THREADS=1 python run_pretrain.py $common_args
else
    OMP_NUM_THREADS=1 torchrun --nproc_per_node=$GPUS --master_port=2999 \\
        run_pretrain.py --distributed $common_args
fi
'''


def test_a_semicolon_in_a_variables_value_is_part_of_a_word():
    """``$common_args`` unquoted is split into words on whitespace only: the ``;`` of
    ``5,1,1;1,3,1`` does not end the command (before: q_strides was "5,1,1" and every
    later argument was lost)."""
    found = script_arguments(COMMON_ARGS_SH, {}, {})
    first = dict(found[:9])
    assert first["q_strides"] == "5,1,1;1,3,1"
    assert first["input_size"] == [900, 3, 24] and first["stages"] == [3, 4, 5]
    assert first["mask_unit_attn"] == [True, False, False] and first["patch_kernel"] == [3, 1, 24]
    assert first["init_embed_dim"] == 128 and first["pin_mem"] is True and first["output_dir"] == "outputs/mice/experiment1"
    # both branches' command lines, the torchrun one with its own flag
    assert [d for d, _ in found].count("q_strides") == 2 and ("distributed", True) in found
    assert "nproc_per_node" not in dict(found)  # torchrun's own options come before the script


MULTILINE_SH = '''\
common_args="--dataset shot \\
    --path_to_data_dir data/train_dictionary_poses.npy
    --batch_size 512 \\
    --input_size 400 1 72 \\
    --q_strides 2,1,4;2,1,6"
python run_pretrain.py $common_args
'''


def test_a_quoted_assignment_over_several_lines():
    """A quoted value may hold newlines (a line without its backslash): bash reads on to
    the closing quote, and word splitting takes the newline as a space (before: the
    assignment was not read, and nothing came from the script)."""
    found = dict(script_arguments(MULTILINE_SH, {}, {}))
    assert found["path_to_data_dir"] == "data/train_dictionary_poses.npy"
    assert found["batch_size"] == 512 and found["input_size"] == [400, 1, 72] and found["q_strides"] == "2,1,4;2,1,6"


def test_shell_words_as_bash_makes_them():
    script = textwrap.dedent('''\
        ARGS=(--lr 1e-3 --name "a b")
        EPOCHS=${EPOCHS:-200}
        OUT="runs/$EPOCHS"
        cat <<EOF > notes.txt
        python not_run.py --lr 5
        EOF
        python train.py "${ARGS[@]}" --epochs $EPOCHS --out $OUT --seed $1 --date $(date +%s) 2>&1 | tee log  # a comment
        python -m pkg.main --x=1;python other.py --y 2 && echo --z 3
    ''')
    words = commands(script)
    assert ["python", "train.py", "--lr", "1e-3", "--name", "a b", "--epochs", "200", "--out", "runs/200", "--seed", "$1", "--date", "$(date +%s)", "2>&", "1"] in words
    assert not any("not_run.py" in w for c in words for w in c)  # a here-document's body
    found = script_arguments(script, {}, {})
    assert ("lr", 1e-3) in found and ("name", "a b") in found and ("epochs", 200) in found and ("out", "runs/200") in found
    assert "seed" not in dict(found) and "date" not in dict(found)  # only known when it runs
    assert ("x", 1) in found and ("y", 2) in found and "z" not in dict(found)


# -- 3. the repo's own argparse type= functions ------------------------------------------------

MISC_PY = '''\
import argparse
import os


def parse_tuples(arg):
    try:
        return [tuple(map(int, item.split(","))) for item in arg.split(";")]
    except ValueError:
        raise argparse.ArgumentTypeError("Invalid tuple format. Expected comma-separated numbers.")


def str2bool(v):
    if type(v) == bool:
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    elif v.lower() in ("no", "false", "f", "n", "0"):
        return False
    else:
        raise argparse.ArgumentTypeError("Boolean value expected.")


def from_file(path):
    with open(path) as f:  # not a pure function of the string: never run by verify
        return f.read()
'''

PRETRAIN_PY = '''\
import argparse

from util.misc import parse_tuples, str2bool
from util import misc


def get_args_parser():
    parser = argparse.ArgumentParser("pretraining", add_help=False)
    parser.add_argument("--input_size", default=(600, 3, 24), nargs="+", type=int)
    parser.add_argument("--stages", default=(2, 3, 4), nargs="+", type=int)
    parser.add_argument("--q_strides", default="1,1,3;1,1,4", type=parse_tuples)
    parser.add_argument("--mask_unit_attn", default=[True, False, False], nargs="+", type=str2bool)
    parser.add_argument("--patch_kernel", default=(4, 1, 2), nargs="+", type=int)
    parser.add_argument("--init_embed_dim", default=48, type=int)
    parser.add_argument("--norm_loss", default=True, type=misc.str2bool)
    parser.add_argument("--size", default="2x3", type=lambda s: tuple(int(v) for v in s.split("x")))
    parser.add_argument("--notes", default="", type=misc.from_file)
    parser.add_argument("--sep_pos_embed", action="store_true")
    parser.set_defaults(sep_pos_embed=True)
    return parser
'''

RUN_PY = "from main_pretrain import get_args_parser\n\nargs = get_args_parser().parse_args()\n"

TYPED_SH = '''\
python run_pretrain.py --input_size 900 --stages 3 4 5 --q_strides 5,1,1;1,3,1 --mask_unit_attn yes no no \\
    --norm_loss n --size 4x5 --notes /etc/hostname
'''


def typed_repo(root: Path) -> Path:
    (root / "util").mkdir(parents=True)
    (root / "util" / "__init__.py").write_text("")
    (root / "util" / "misc.py").write_text(MISC_PY)
    (root / "main_pretrain.py").write_text(PRETRAIN_PY)
    (root / "run_pretrain.py").write_text(RUN_PY)
    (root / "scripts").mkdir()
    (root / "scripts" / "train.sh").write_text(TYPED_SH.replace("5,1,1;1,3,1", '"5,1,1;1,3,1"'))
    return root


def test_values_through_the_repos_own_argparse_types(tmp_path: Path):
    """A script's words become what the repo's argparse makes of them: its ``type=``
    functions (imported from util/misc.py, a module attribute, a lambda) run as the repo
    defines them where they are pure functions of the string; ``nargs="+"`` a list even
    of one word; string defaults go through the type too; ``set_defaults`` wins over an
    option's default.  A type function doing anything else (opening a file) is not run.
    Before: "5,1,1;1,3,1" and "yes" stayed strings, ``--input_size 900`` an int."""
    values = repo_values(str(typed_repo(tmp_path)), set())
    assert values["q_strides"] == ([(5, 1, 1), (1, 3, 1)], "scripts/train.sh --q_strides")
    assert values["mask_unit_attn"][0] == [True, False, False] and values["norm_loss"][0] is False
    assert values["input_size"][0] == [900] and values["stages"][0] == [3, 4, 5]
    assert values["size"][0] == (4, 5)
    assert values["notes"][0] == "/etc/hostname"  # from_file was not run
    assert values["sep_pos_embed"] == (True, "main_pretrain.py --sep_pos_embed")


def test_a_run_is_its_command_line_over_the_defaults_of_the_script_it_runs(tmp_path: Path):
    """Each python command line is one run: its words over the argparse defaults of the
    script it runs (run_pretrain.py takes its parser from main_pretrain.py)."""
    runs = []
    repo_values(str(typed_repo(tmp_path)), set(), None, runs)
    run = next(r for r in runs if r.where == "scripts/train.sh (python run_pretrain.py)")
    assert run.values["q_strides"] == [(5, 1, 1), (1, 3, 1)] and run.values["sep_pos_embed"] is True
    assert run.origin["q_strides"] == "scripts/train.sh --q_strides" and run.origin["sep_pos_embed"] == "main_pretrain.py --sep_pos_embed"
    assert "q_strides" in run.given and "sep_pos_embed" not in run.given


# -- 5. a YAML config the repo turns into a command line --------------------------------------

CONFIGS_YML = '''\
base:
  dataset: arena
  model: hbehave
  input_size: 1 54
  stages: 2 3 4
  q_strides: 5,1,1;15,1,1 # 2 s, then 30 s
  mask_unit_attn: "True True True"
  patch_kernel: 10 1 54
  init_embed_dim: 96
  norm_loss: False

flags:
  - pin_mem

experiments:
  - name: experiment1
'''


def test_a_yaml_mapping_of_argparse_options_is_a_run(tmp_path: Path):
    """``base:`` of a YAML config whose keys are the repo's argparse options, with
    space-separated values (``input_size: 1 54``): what the repo's script passes as
    ``--input_size 1 54``, converted by its argparse (before: the strings as they are)."""
    repo = typed_repo(tmp_path)
    (repo / "scripts" / "train.sh").unlink()
    (repo / "scripts" / "configs.yml").write_text(CONFIGS_YML)
    pytest.importorskip("yaml")
    runs = []
    values = repo_values(str(repo), set(), None, runs)
    assert values["input_size"] == ([1, 54], "scripts/configs.yml")
    base = next(r for r in runs if r.where == "scripts/configs.yml:base")
    assert base.values["q_strides"] == [(5, 1, 1), (15, 1, 1)] and base.values["mask_unit_attn"] == [True, True, True]
    assert base.values["patch_kernel"] == [10, 1, 54] and base.values["init_embed_dim"] == 96 and base.values["norm_loss"] is False
    assert base.values["sep_pos_embed"] is True  # argparse's default for what the config leaves out
    assert not any(r.where.endswith(":experiments") or r.where.endswith(":flags") for r in runs)


def test_the_smallest_run_first():
    """Among a factory's runs the smallest stated input is built first; a size naming fewer
    dims than the run's patches (the frames free) cannot be told, so it comes last."""
    from hiera_rewrite.verify.arguments import _input_cost

    def run(**values):
        return Namespace("x", values, {k: "x" for k in values})

    spatial = run(input_size=[1, 54], patch_kernel=[10, 1, 54])
    small, large = run(input_size=[400, 1, 72], patch_kernel=[2, 1, 3]), run(input_size=[900, 3, 24], patch_kernel=[3, 1, 24])
    assert min([large, spatial, small], key=_input_cost) is small
    assert _input_cost(spatial) == float("inf") and _input_cost(run(img_size=224)) == 224


# -- 4. the input follows the configuration ----------------------------------------------------


def _inputs():
    from hiera_rewrite.verify.inputs import Inputs

    return Inputs()


def test_input_grid_from_per_stage_strides_and_numpy_mask_units():
    """A model keeping ``mask_unit_size = tuple(np.prod(q_strides, axis=0))`` (numpy
    integers) and one stride per pooled stage: its units are the strides' products per dim
    (before: no grid, the model ran at its full configured size)."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")

    class Net(torch.nn.Module):
        def __init__(self, input_size=(450, 1, 75), q_strides=((5, 1, 1), (3, 1, 1)), patch=(3, 1, 75)):
            super().__init__()
            self.patch_stride = patch
            self.proj = torch.nn.Conv3d(1, 8, patch, patch)
            self.tokens_spatial_shape = [i // s for i, s in zip(input_size, patch)]
            self.mask_unit_size = tuple(np.prod(q_strides, axis=0))
            self.q_strides = list(q_strides)
            self.stage_ends = [0, 1, 2]

        def forward(self, x):
            return self.proj(x)

    assert _inputs().small_input_size(Net(), {}, torch) == [90, 1, 75]  # 2 units of 15 frames x 3; the rest one unit


def test_a_forward_masking_its_own_input_keeps_at_least_one_unit():
    """``forward(x, mask_ratio=0.6)`` keeps int(units * 0.4) units: 2 units keep none, so
    the first dim that may grow gets a third."""
    torch = pytest.importorskip("torch")

    class MAE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_stride = (3, 1, 75)
            self.proj = torch.nn.Conv3d(1, 8, self.patch_stride, self.patch_stride)
            self.tokens_spatial_shape = [150, 1, 1]
            self.mask_unit_size = (15, 1, 1)

        def forward(self, x, mask_ratio: float = 0.6):
            return self.proj(x)

    assert _inputs().small_input_size(MAE(), {}, torch) == [135, 1, 75]


def test_a_size_of_the_trailing_dims_gets_its_leading_dims():
    """A model taking any number of frames states only its spatial grid
    (``input_size=(1, 54)``) while its patches are 3-D: the frames are the smallest its
    patch stride and mask units accept (before: a 4-D input for a Conv3d)."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self, input_size=(1, 54)):
            super().__init__()
            self.patch_stride = (10, 1, 54)
            self.proj = torch.nn.Conv3d(1, 8, self.patch_stride, self.patch_stride)
            self.tokens_spatial_shape = [i // s for i, s in zip(input_size, self.patch_stride[1:])]
            self.mask_unit_size = (75, 1, 1)

        def forward(self, x):
            return self.proj(x)

    net = Net()
    assert _inputs().own_size(net, {"input_size": (1, 54)}, torch) == [1500, 1, 54]
    assert _inputs().small_input_size(net, {"input_size": (1, 54)}, torch) == [1500, 1, 54]


# -- the whole pattern, verified ---------------------------------------------------------------

FACTORY = '''

def hbehave(**kwdargs):
    """Called as models_defs.__dict__[args.model](**vars(args)): reads a few keys, hands
    the whole namespace on."""
    return Hiera(
        in_chans=1,
        embed_dim=kwdargs["init_embed_dim"],
        num_heads=kwdargs["init_num_heads"],
        patch_stride=kwdargs["patch_kernel"],
        patch_padding=(0, 0, 0),
        **kwdargs
    )
'''

MODEL_ARGPARSE = '''\
import argparse

from util.misc import parse_tuples, str2bool


def get_args_parser():
    parser = argparse.ArgumentParser("pretraining", add_help=False)
    parser.add_argument("--model", default="hbehave", type=str)
    parser.add_argument("--input_size", default=(600, 3, 24), nargs="+", type=int)
    parser.add_argument("--stages", default=(2, 3, 4), nargs="+", type=int)
    parser.add_argument("--q_strides", default=[(1, 1, 3), (1, 1, 4)], type=parse_tuples)
    parser.add_argument("--mask_unit_size", default=(4, 1, 4), nargs="+", type=int)
    parser.add_argument("--mask_unit_attn", default=[True, False, False], nargs="+", type=str2bool)
    parser.add_argument("--patch_kernel", default=(4, 1, 2), nargs="+", type=int)
    parser.add_argument("--init_embed_dim", default=48, type=int)
    parser.add_argument("--init_num_heads", default=2, type=int)
    parser.add_argument("--sep_pos_embed", action="store_true")
    parser.add_argument("--epochs", default=100, type=int)
    return parser
'''

MODEL_SH = '''\
GPUS=$1
common_args="--model hbehave \\
    --q_strides 1,1,2;1,1,2 \\
    --input_size 8 4 32
    --mask_unit_size 1 1 4 \\
    --stages 1 1 1 \\
    --mask_unit_attn True False False \\
    --patch_kernel 2 1 2 \\
    --init_embed_dim 16 \\
    --init_num_heads 1 \\
    --epochs 200"

if [[ $GPUS == 1 ]]; then
    python run_pretrain.py $common_args
else
    torchrun --nproc_per_node=$GPUS run_pretrain.py --distributed $common_args
fi
'''


def behaviour_repo(tmp_path: Path, yaml_config: bool = False) -> Path:
    """repo/models/: a Hiera fork whose ``__init__`` takes one stride per pooled stage
    (``q_strides``) and absorbs the rest of the namespace (``**kwargs``), its defaults no
    consistent configuration (a 3-D input with 2-D patches); a factory reading
    ``kwdargs["init_embed_dim"]`` and handing the namespace on (so no build of the class
    from its own defaults runs, whatever input); the configuration only in
    the training script (or a YAML config), parsed by the repo's argparse."""
    from tests.test_verify_layouts import classifier_fork, write

    edits = [
        ("        sep_pos_embed: bool = False,\n    ):", "        sep_pos_embed: bool = False,\n        q_strides: List[Tuple[int, ...]] = [(1, 2, 2), (1, 2, 2)],\n        **kwargs,  # the rest of the training script's namespace\n    ):"),
        ("        depth = sum(stages)\n", "        q_stride, q_pool = tuple(q_strides[0]), len(q_strides)  # one stride per pooled stage\n        depth = sum(stages)\n"),
    ]
    sources = classifier_fork({"input_size": (64, 4, 32)}, edits)
    sources["hiera.py"] += FACTORY
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    folder = write(repo / "models", sources)
    write(repo / "util", {"__init__.py": "", "misc.py": MISC_PY})
    write(repo, {"main_pretrain.py": MODEL_ARGPARSE, "run_pretrain.py": RUN_PY})
    if yaml_config:
        config = "\n".join(line for line in CONFIGS_YML.splitlines() if not line.startswith(("  dataset", "  norm_loss")))
        config = config.replace("input_size: 1 54", "input_size: 8 4 32\n  mask_unit_size: 1 1 4\n  init_num_heads: 1")
        config = config.replace("stages: 2 3 4", "stages: 1 1 1").replace("5,1,1;15,1,1", "1,1,2;1,1,2")
        config = config.replace('"True True True"', '"True False False"').replace("10 1 54", "2 1 2").replace("init_embed_dim: 96", "init_embed_dim: 16")
        write(repo / "scripts", {"configs.yml": config})
    else:
        write(repo / "scripts", {"train.sh": MODEL_SH})
    return folder


def test_a_namespace_factory_built_with_the_scripts_configuration(tmp_path: Path, capsys):
    """The factory is built as the training script calls it: the script's whole
    configuration (read through ``$common_args``, its ``;`` and its line without a
    backslash, typed by the repo's argparse) on the model, small widths, the input
    following the configuration with one channel (before: the class's inconsistent
    defaults, NOT PROVEN)."""
    from tests.test_verify_layouts import assert_all_proven

    pytest.importorskip("torch")
    out = assert_all_proven(behaviour_repo(tmp_path), capsys)
    assert "model models.hiera:hbehave -> Hiera  input (2, 1, 4, 2, 16)" in out, out
    assert "the arguments of scripts/train.sh (python run_pretrain.py)" in out, out
    assert "patch_stride=[2, 1, 2] (scripts/train.sh --patch_kernel)" in out, out


def test_a_namespace_factory_built_with_a_yaml_configs_run(tmp_path: Path, capsys):
    """The same model configured by a YAML ``base:`` mapping of argparse options with
    space-separated values, which the repo turns into a command line (no shell script)."""
    from tests.test_verify_layouts import assert_all_proven

    pytest.importorskip("torch")
    pytest.importorskip("yaml")
    out = assert_all_proven(behaviour_repo(tmp_path, yaml_config=True), capsys)
    assert "model models.hiera:hbehave -> Hiera  input (2, 1, 4, 2, 16)" in out, out
    assert "the arguments of scripts/configs.yml:base" in out, out


# -- a method a later def of the same name replaces --------------------------------------------


def test_a_site_in_a_replaced_method_is_dead_code(tmp_path: Path, capsys):
    """A fork pasting a new ``forward`` below the old one in the same class body: the old
    one's sites can never run (unreachable in the original: dead code), and verify does
    not keep building models to reach them; the live copy's sites are proven (before: NOT
    PROVEN, 'no compared case ran it')."""
    from hiera_rewrite import cli
    from tests.test_verify_layouts import classifier_fork, verify, write

    pytest.importorskip("torch")
    sources = classifier_fork()
    hiera = sources["hiera.py"]
    start = hiera.index("    def forward(\n        self,\n        x: torch.Tensor,\n        mask: torch.Tensor = None,")
    live = hiera[start:].rstrip("\n") + "\n"
    sources["hiera.py"] = hiera[:start] + live + "\n" + live
    dead_line = hiera[:start].count("\n") + 1
    live_line = dead_line + live.count("\n") + 1
    code, out, err = verify(write(tmp_path / "x" / "hiera", sources), capsys)
    assert code == cli.EXIT_CHANGED, out + err
    assert "verify: PASSED (2/3 sites exercised, 1 unreachable in the original, every comparison equal)" in out, out
    assert f"the later def forward replaces it at {tmp_path}/x/hiera/hiera.py:{live_line} (dead code: no call runs it)" in out, out
    assert re.search(r"hiera\.py:\d+:\d+ HR003 in Hiera\.forward: the later def forward replaces it", out), out


# -- a run-time switch of the model ------------------------------------------------------------

WEIGHTS_EDITS = [
    ("        norm_layer: nn.Module = partial(nn.LayerNorm, eps=1e-6),\n        **kwdargs,\n    ):",
     "        norm_layer: nn.Module = partial(nn.LayerNorm, eps=1e-6),\n        with_weights: bool = False,\n        **kwdargs,\n    ):"),
    ("        del self.norm, self.head\n", "        del self.norm, self.head\n        self.with_weights = with_weights\n"),
    ("        self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor\n    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:",
     "        self, x: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor, weights: Optional[torch.Tensor] = None\n    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:"),
    ("        pred = pred[mask]\n        loss = (pred - label) ** 2\n",
     "        pred = pred[mask]\n        loss = (pred - label) ** 2\n        if weights is not None:  # a weight per input value\n"
     "            loss = loss * self.get_pixel_label_2d(weights, mask)\n"),
    ("    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:\n\n        latent, mask = self.forward_encoder(x, mask_ratio, mask=mask)",
     "    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:\n        weights = None\n"
     "        if self.with_weights:  # the input's values, then their weights, stacked on the last dim\n"
     "            x, weights = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]\n"
     "        latent, mask = self.forward_encoder(x, mask_ratio, mask=mask)"),
    ("        return *self.forward_loss(x, pred, ~pred_mask), mask", "        return *self.forward_loss(x, pred, ~pred_mask, weights), mask"),
]


def test_a_path_behind_a_run_time_switch(tmp_path: Path, capsys):
    """An MAE whose loss weighting runs only with ``with_weights=True`` (default False,
    read in ``forward``), its input then the values and their weights stacked on the last
    dim: while that site is partly run, the model is built again with the switch on, and
    its input, where the original raises with the model's own, twice as wide (before: NOT
    PROVEN, 'only part of it ran')."""
    from tests.test_verify_layouts import _cut_factories, assert_all_proven, classifier_fork, sub, upstream_files, write

    pytest.importorskip("torch")
    sources = classifier_fork()
    mae = _cut_factories(upstream_files()["hiera_mae.py"])
    for old, new in WEIGHTS_EDITS:
        mae = sub(mae, old, new)
    sources["hiera_mae.py"] = mae
    out = assert_all_proven(write(tmp_path / "x" / "hiera", sources), capsys)
    assert "model hiera.hiera_mae:MaskedAutoencoderHiera (class) (with_weights=True)  input (2, 3, 64, 128)" in out, out
    assert "with_weights=True" in out and "the original raised with (2, 3, 64, 64)" in out, out


# -- a byte-for-byte copy of a package verified above -----------------------------------------


def test_an_identical_copy_of_a_package_gets_its_verdict(tmp_path: Path, capsys):
    """Two byte-identical copies of a package in one repo (old_stuff/models_old/ beside
    old_and_failed_stuff/models_old/): the second takes the first's verdict without a
    worker of its own (before: verified twice, the time of both)."""
    from hiera_rewrite import cli
    from tests.test_verify_layouts import classifier_fork, verify, write

    pytest.importorskip("torch")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    first = write(repo / "old" / "models_old", classifier_fork())
    second = write(repo / "older" / "models_old", classifier_fork())
    code, out, err = verify(first / "hiera.py", capsys, str(second / "hiera.py"))
    assert code == cli.EXIT_CHANGED, out + err
    assert out.count("verify: PASSED (2/2 sites exercised, every comparison equal)") == 1, out
    same = re.search(rf"import root {re.escape(str(repo))}/(\w+) \(models_old\): the same files as package layout, import root {re.escape(str(repo))}/(\w+) \(models_old\)", out)
    assert same and {same.group(1), same.group(2)} == {"old", "older"}, out
    assert "PASSED, as verified above" in out, out
    assert "hiera-rewrite: 2 files would be rewritten, 0 unchanged, verified." in err, err
