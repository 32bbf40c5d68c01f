"""This node's GPU, as the memory plan sees it (issue 28, finding 7): a board is a table entry only
by its exact NVML name and memory; any other board is planned with the memory it reports, and the
plan says so."""

from __future__ import annotations

import os
import sys

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.memory import gpus as G
from clawgym.memory import memory_plan, this_node_gpu
from tests.test_preflight import fake_nvidia_smi


@pytest.fixture
def node(tmp_path, monkeypatch):
    """This node's GPUs as nvidia-smi reports them (NVML hidden), through the real listing code."""
    def make(name: str, mib: int):
        fake_nvidia_smi(tmp_path / "bin", [(name, mib)] * 8)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        monkeypatch.setitem(sys.modules, "pynvml", None)
        return this_node_gpu(to_plain(compose(["model=qwen3_4b", "gpu_layout=split_1_1"])))
    return make


# NVML totals: GH200 480GB 97871 MiB (95.6 GiB), H100 NVL 95830 MiB (93.6 GiB).
@pytest.mark.parametrize("name,mib", [("NVIDIA GH200 480GB", 97871), ("NVIDIA H100 NVL", 95830)])
def test_a_board_whose_name_only_contains_a_known_one_is_planned_with_its_own_memory(node, name, mib):
    gpu = node(name, mib)
    assert gpu == {"device": name, "gpu": None, "gpu_memory_gib": round(mib / 1024, 2)}
    plan = memory_plan(to_plain(compose(["model=qwen3_4b", "gpu_layout=split_1_1"])), gpu)
    # Not the 139.9 GiB of an H200 nor the 79.2 GiB of an H100 80GB: what the board has, less the driver's share.
    assert plan.gpu_memory_gib == pytest.approx(mib / 1024 - G.DRIVER_RESERVED_GIB, abs=0.01)
    assert plan.gpu == name
    assert "not in clawgym's GPU table, planned with its detected memory" in plan.gpu_source


def test_the_boards_of_the_table_are_still_found_by_their_nvml_names(node):
    assert node("NVIDIA H200", 143771)["gpu"] == "h200_141gb"
    assert node("NVIDIA H100 80GB HBM3", 81559)["gpu"] == "h100_80gb"
    assert node("NVIDIA A100-SXM4-40GB", 40960)["gpu"] == "a100_40gb"


def test_a_known_name_with_other_memory_is_not_that_entry():
    # The same name, a board with half the memory (a partitioned or a different SKU): its own memory counts.
    assert G.match_model("NVIDIA H200", 71885) is None
    assert G.match_model("nvidia h200", 143771) == "h200_141gb"
