"""verify's constructor arguments, without a worker process: the values a repo itself
uses (argparse defaults, JSON and YAML configs), which arguments are configuration
objects, and the order in which a missing value is filled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hiera_rewrite.verify.arguments import Building, Config, MissingArgs, MissingKey, config_params, repo_values

SCRIPT = '''\
import argparse
p = argparse.ArgumentParser()
p.add_argument("--model-name", default="hiera_base_224")
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("-b", "--batch-size", dest="batch", type=int, default=64)
p.add_argument("--no-default")
p.add_argument("--computed", default=len("abc"))
'''


def test_repo_values_from_argparse_json_and_yaml(tmp_path: Path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "hiera_tiny.json").write_text(json.dumps({"model": {"input_size": [64, 4, 32], "in_chans": 1}}))
    (tmp_path / "configs" / "hiera_large.json").write_text(json.dumps({"model": {"input_size": [224, 224], "in_chans": 3, "depth": 7}}))
    (tmp_path / "configs" / "pose.yaml").write_text("model:\n  mask_unit_size: [4, 1, 4]\n  in_chans: 5\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "x.json").write_text(json.dumps({"mask_unit_size": 1}))
    values = repo_values(str(tmp_path), {"node_modules"})
    assert values["model_name"] == ("hiera_base_224", "train.py --model_name")
    assert values["batch"] == (64, "train.py --batch")
    assert values["lr"][0] == 1e-3
    assert "no_default" not in values and "computed" not in values  # only literal defaults
    # the smallest model's config first: tiny before large (and before the YAML)
    assert values["input_size"] == ([64, 4, 32], "configs/hiera_tiny.json")
    assert values["in_chans"] == (1, "configs/hiera_tiny.json")
    assert values["depth"] == (7, "configs/hiera_large.json")
    pytest.importorskip("yaml")
    assert values["mask_unit_size"] == ([4, 1, 4], "configs/pose.yaml")


class Takes:
    def __init__(self, cfg, stages=(1, 2), opt=None, size: int = 3):
        self.a = cfg.embed_dim
        self.b = stages[:1]  # a sized default is data, not a configuration
        self.c = opt["x"] if opt is not None else None
        self.d = size


def test_config_params():
    assert config_params(Takes) == ["cfg", "opt"]


def test_config_object_access():
    asked = []

    def fill(key):
        asked.append(key)
        if key == "unknown":
            raise MissingKey(key)
        return 8

    values = {"in_chans": 1, "model": {"depth": 2}}
    cfg = Config(values, fill)
    assert cfg.in_chans == 1 and cfg["in_chans"] == 1
    assert cfg.model.depth == 2
    assert cfg.embed_dim == 8 and values["embed_dim"] == 8  # filled once, replayed on the other side
    assert cfg.get("mlp_ratio", 4.0) == 4.0  # the code's own default is kept
    assert getattr(cfg, "unknown", "dflt") == "dflt"  # an unfillable key behaves as absent
    with pytest.raises(MissingArgs):
        cfg.unknown
    assert asked == ["embed_dim", "unknown", "unknown"]


class _Filler(Building):
    def __init__(self, user, repo):
        self.spec = {"kwargs": user}
        self._repo = repo
        self.origin = {}


def test_fill_order():
    repo = {"embed_dim": (96, "train.py --embed_dim"), "stages": ((2, 3, 16), "cfg.json"), "input_size": ((256,), "cfg.json"),
            "model_name": ("hiera_x", "train.py --model_name")}
    filler = _Filler({"in_chans": 2}, repo)
    filled = {}
    assert filler.fill("in_chans", filled) == 2 and filler.origin["in_chans"] == "--kwargs"
    assert filler.fill("embed_dim", filled) == 8  # a size: small, not the repo's 96
    assert filler.fill("stages", filled) == (1, 1, 1)  # as many stages as the repo's
    assert filler.fill("input_size", filled) == (256,) and filler.origin["input_size"] == "cfg.json"
    assert filler.fill("model_name", filled) == "hiera_x"
    assert filler.fill("q_stride", filled) == (2, 2) and filler.origin["q_stride"] is None  # from its name
    with pytest.raises(MissingArgs):
        filler.fill("checkpoint", filled)


def test_checkpoint_arguments_are_turned_off():
    """Issue 22, class 7: weights-loading constructor arguments are built off; sizes,
    what is given and arguments without a default are left alone."""
    from pathlib import Path

    from hiera_rewrite.verify.arguments import NO_DEFAULT, Building

    params = {
        "pretrained": True,
        "checkpoint_path": "ckpt/mae.pth",
        "init_ckpt": Path("weights.pt"),
        "resume": False,
        "pretrained_cfg": None,
        "load_from": NO_DEFAULT,
        "embed_dim": 96,
        "ckpt": "given.pth",
    }
    off = Building.checkpoints_off(params, {"ckpt": "given.pth"})
    assert off == {"pretrained": False, "checkpoint_path": "", "init_ckpt": None}


TRAIN_SH = '''\
#!/bin/bash
EPOCHS=200
python main_pretrain.py --model hiera_pose --data_path $DATA \\
    --input-size 64,4,32 --q_strides "5,1,1;1,3,1" --stages 2 3 4 --sep_pos_embed \\
    --epochs $EPOCHS --lr=1e-3 --init_embed_dim 96 2>&1 | tee log.txt
torchrun --nproc_per_node 8 main_finetune.py --input-size 32,4,16 && echo --not_an_argument 1
'''

PRETRAIN_PY = '''\
import argparse
p = argparse.ArgumentParser()
p.add_argument("--input-size", default="400,1,72", type=str)
p.add_argument("--q_strides", default="15,1,1;16,1,1")
p.add_argument("--mask_unit_size", default="4,1,4", type=str)
p.add_argument("--init_embed_dim", default=64, type=int)
p.add_argument("--model_name", default="1,2")
'''


def test_repo_values_from_shell_scripts(tmp_path: Path):
    """Issue 22, class 3: `--name value` arguments of the python command lines of the
    repo's shell scripts; the script's value wins over the argparse default (the script is
    what the repo runs), the first command line over later ones; a value that is still a
    shell variable is skipped; several words are a list, none True."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.sh").write_text(TRAIN_SH)
    (tmp_path / "main_pretrain.py").write_text(PRETRAIN_PY)
    values = repo_values(str(tmp_path), set())
    assert values["input_size"] == ("64,4,32", "scripts/train.sh --input_size")  # argparse's dest, the script's value
    assert values["q_strides"] == ("5,1,1;1,3,1", "scripts/train.sh --q_strides")
    assert values["stages"] == ([2, 3, 4], "scripts/train.sh --stages")
    assert values["sep_pos_embed"][0] is True and values["lr"][0] == 1e-3
    assert values["epochs"][0] == 200 and values["init_embed_dim"][0] == 96
    assert "data_path" not in values and "not_an_argument" not in values
    assert values["mask_unit_size"] == ("4,1,4", "main_pretrain.py --mask_unit_size")  # only in argparse


def test_strings_of_integers_where_a_sequence_is_expected(tmp_path: Path):
    from hiera_rewrite.verify.arguments import as_sequence

    assert as_sequence("input_size", "64,4,32") == (64, 4, 32)  # guess("input_size") is a tuple
    assert as_sequence("q_strides", "5,1,1;1,3,1") == [(5, 1, 1), (1, 3, 1)]  # the plural of q_stride
    assert as_sequence("window", "1,2", [8]) == [1, 2]  # the constructor's default is a list
    assert as_sequence("model_name", "1,2") == "1,2"  # no sequence expected: kept a string
    assert as_sequence("input_size", "64") == "64" and as_sequence("input_size", "a,b") == "a,b"
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.sh").write_text(TRAIN_SH)
    (tmp_path / "main_pretrain.py").write_text(PRETRAIN_PY)
    filler = _Filler({}, repo_values(str(tmp_path), set()))
    filled = {}
    assert filler.fill("q_strides", filled) == [(5, 1, 1), (1, 3, 1)]
    assert filler.origin["q_strides"] == "scripts/train.sh --q_strides"
    assert filler.fill("mask_unit_size", filled) == (4, 1, 4)
    assert filler.fill("stages", filled) == [1, 1, 1]  # a size: as many stages as the script's, one block each
    assert filler.fill("model_name", filled) == "1,2"


def test_a_factory_called_by_name_is_the_smallest_one_the_module_defines(tmp_path: Path, monkeypatch):
    """getattr(zoo, model_name) / globals()[model_name]: the smallest-sized name among the
    module's own defs, classes and partial(...) bindings; never an imported name, and none
    at all where no name says a size."""
    import importlib
    import sys

    from hiera_rewrite.verify.arguments import named_factory, registry_key

    (tmp_path / "zoo_a.py").write_text(
        "from functools import partial\n"
        "from os.path import join as join_tiny\n\n"
        "class Net:\n    def __init__(self, width=1):\n        self.width = width\n\n"
        "def net_base_224():\n    return Net(2)\n\n"
        "net_small = partial(Net, width=1)\n\n"
        "def helper():\n    return None\n\n"
        "class Wrapper:\n"
        "    def __init__(self, arch):\n        self.net = getattr(sys_mod, arch)()\n\n"
        "class Local:\n"
        "    def __init__(self, arch):\n        self.net = globals()[arch]()\n"
    )
    (tmp_path / "zoo_b.py").write_text("def build():\n    return None\n\ndef make_net():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    zoo_a, zoo_b = importlib.import_module("zoo_a"), importlib.import_module("zoo_b")
    try:
        assert named_factory(zoo_a) == ("net_small", "a factory of zoo_a, called by name")  # not join_tiny (imported)
        assert named_factory(zoo_b) is None  # no name says a size: not guessed
        assert named_factory(zoo_a.Net) is None  # only a module is looked into
        zoo_a.sys_mod = zoo_a
        assert registry_key(zoo_a.Wrapper, "arch") == ("net_small", "a factory of zoo_a, called by name")
        assert registry_key(zoo_a.Local, "arch") == ("net_small", "a factory of zoo_a, called by name")
        assert registry_key(zoo_a.Wrapper, "other") is None
    finally:
        sys.modules.pop("zoo_a", None)
        sys.modules.pop("zoo_b", None)
