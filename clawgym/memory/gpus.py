"""GPU models the memory plan can target, and how a config or this node names one.

``total_gib`` is the memory NVML reports (GiB = 2^30 bytes); ``usable_gib`` what a process can
fill after the driver's own reservation (NVML total minus about 0.5 GiB on these boards). The
CUDA context, NCCL buffers and allocator slack are the plan's overhead terms, not taken here.

The step-time model (``clawgym/steptime/``) reads three datasheet columns, SXM boards:
``hbm_gbs`` memory bandwidth (GB/s = 1e9 bytes/s), ``bf16_tflops`` peak dense (no sparsity) bf16
tensor-core TFLOP/s, ``nvlink_gbs`` NVLink bandwidth per GPU (GB/s, both directions summed; one
direction is half). Sources: NVIDIA H100 and H200 Tensor Core GPU datasheets (H100 SXM 3.35 TB/s,
989 TFLOPS bf16 dense, NVLink 900 GB/s; H200 SXM 4.8 TB/s, 989 TFLOPS, 900 GB/s), NVIDIA A100
datasheet (80GB SXM 2,039 GB/s, 40GB 1,555 GB/s; 312 TFLOPS bf16 dense; NVLink 600 GB/s), NVIDIA
HGX B200 specifications (8 TB/s, 2.25 PFLOPS bf16 dense per GPU, NVLink 5 1.8 TB/s).
"""

from __future__ import annotations

from dataclasses import dataclass
import shutil
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Gpu:
    name: str
    description: str
    total_gib: float
    usable_gib: float
    #: The exact names NVML (``nvmlDeviceGetName``, = ``nvidia-smi --query-gpu=name``) gives boards
    #: of this entry. Matched whole, never by substring: "NVIDIA GH200 480GB" (96 GiB) contains
    #: "H200" and "NVIDIA H100 NVL" (94 GB) contains "H100", and neither has the memory of the entry.
    nvml_names: Tuple[str, ...] = ()
    # Datasheet figures for the step-time model (see the module docstring for the sources).
    hbm_gbs: float = 3350.0
    bf16_tflops: float = 989.0
    nvlink_gbs: float = 900.0


GPUS: Dict[str, Gpu] = {g.name: g for g in [
    Gpu("h100_80gb", "NVIDIA H100 80GB HBM3", 79.65, 79.15,
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800", "NVIDIA H800 PCIe"),
        hbm_gbs=3350.0, bf16_tflops=989.0, nvlink_gbs=900.0),
    Gpu("h200_141gb", "NVIDIA H200 141GB HBM3e", 140.4, 139.9, ("NVIDIA H200", "NVIDIA H200 NVL"),
        hbm_gbs=4800.0, bf16_tflops=989.0, nvlink_gbs=900.0),
    Gpu("a100_80gb", "NVIDIA A100 80GB", 80.0, 79.5,
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"),
        hbm_gbs=2039.0, bf16_tflops=312.0, nvlink_gbs=600.0),
    Gpu("a100_40gb", "NVIDIA A100 40GB", 40.0, 39.5, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        hbm_gbs=1555.0, bf16_tflops=312.0, nvlink_gbs=600.0),
    Gpu("b200_180gb", "NVIDIA B200 180GB HBM3e", 179.1, 178.6, ("NVIDIA B200",),
        hbm_gbs=8000.0, bf16_tflops=2250.0, nvlink_gbs=1800.0),
]}

#: How far (GiB) a board's reported memory may be from its entry's ``total_gib`` and still be it:
#: NVML's totals of one model differ by driver reservations (tens of MiB), while boards sharing a
#: name with different memory differ by GiBs.
MATCH_TOLERANCE_GIB = 2.0

#: The GPU a plan assumes when ``memory.gpu`` is null and this node shows none (a login node):
#: the smallest common training GPU of the seed's class, so a plan that fits here fits on it.
DEFAULT_GPU = "h100_80gb"


def match_model(name: str, mib: Optional[int]) -> Optional[str]:
    """The table entry of an NVML device name (e.g. "NVIDIA H100 80GB HBM3"), or None.

    The name must be one of an entry's :attr:`Gpu.nvml_names` exactly (case and surrounding spaces
    aside), and the reported memory, when known, within :data:`MATCH_TOLERANCE_GIB` of the entry's:
    anything else is a GPU the table does not know, planned with its own memory (:func:`detect`)."""
    n = " ".join(str(name).split()).lower()
    for gpu in GPUS.values():
        if n not in (x.lower() for x in gpu.nvml_names):
            continue
        if mib and abs(mib / 1024 - gpu.total_gib) > MATCH_TOLERANCE_GIB:
            continue
        return gpu.name
    return None


#: What the driver keeps of a board's memory that NVML counts in its total (see the module doc).
DRIVER_RESERVED_GIB = 0.5


def detect(models: List[Tuple[str, Optional[int]]]) -> Optional[Dict[str, object]]:
    """What this node's GPUs are, from the preflight's NVML/nvidia-smi listing
    (``node_gpus()``): name, table entry (None: not in the table) and the detected memory
    (GiB, kept either way: an unknown board is planned with it); None without GPUs."""
    if not models:
        return None
    name, mib = min(models, key=lambda m: m[1] or 0)
    return {"device": name, "gpu": match_model(name, mib),
            "gpu_memory_gib": round(mib / 1024, 2) if mib else None}


def node_gpus() -> List[Tuple[str, Optional[int]]]:
    """(model name, memory in MiB or None) of each GPU of this node: NVML, else nvidia-smi;
    empty when neither answers."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            out = []
            for i in range(int(pynvml.nvmlDeviceGetCount())):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                name = name.decode() if isinstance(name, bytes) else str(name)
                out.append((name, int(pynvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024)))
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # not installed, or no driver: ask the CLI
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    # Imported here: only a node without NVML runs it, and a dry run need not import it.
    import subprocess

    try:
        proc = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    out = []
    for line in proc.stdout.splitlines():
        name, _, mem = line.rpartition(",")
        if not name.strip():
            continue
        try:
            out.append((name.strip(), int(float(mem.strip()))))
        except ValueError:
            out.append((name.strip(), None))
    return out
