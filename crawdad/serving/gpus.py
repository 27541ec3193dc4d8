"""The machine's GPUs: NVML through `nvidia-ml-py` (pynvml, which vLLM itself depends on) when
it imports, else `nvidia-smi`, else none (the CPU). `CRAWDAD_GPUS` simulates an inventory, for
tests and for planning a node elsewhere (a SLURM job from a login node): a JSON list such as
'[{"index": 0, "name": "H100", "memory_mib": 81559}]', a path to a file holding one, or
"none"."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
from pathlib import Path

from pydantic import TypeAdapter

from crawdad.errors import CrawdadError
from crawdad.safe_files import read_input
from crawdad.serving.base import GPU
from crawdad.serving.bounded import loads

ENV = "CRAWDAD_GPUS"
MAX_GPUS = 1024  # GPUs of one inventory (one node: 8 or 16)
MAX_GIB = 16384  # memory of one GPU
_SMI_TIMEOUT = 20.0


def inventory() -> list[GPU]:
    """The GPUs a plan may use, in index order (empty: none, the servers run on the CPU)."""
    simulated = os.environ.get(ENV, "").strip()
    if simulated:
        return parse_inventory(simulated)
    for reader in (_nvml, _nvidia_smi):
        found = reader()
        if found is not None:
            return found
    return []


def parse_inventory(text: str) -> list[GPU]:
    """A simulated inventory: JSON, a path to a JSON file, or "none"."""
    if text.lower() in ("none", "cpu", "[]"):
        return []
    source, raw = "CRAWDAD_GPUS", text.encode("utf-8", "replace")
    if not text.lstrip().startswith("["):
        path = Path(text).expanduser()
        if not path.is_file():
            raise CrawdadError(
                f"{ENV}={text!r} is neither a JSON list nor a file: write e.g. "
                '\'[{"index": 0, "name": "H100", "memory_mib": 81559}]\' or "none"'
            )
        source, raw = str(path), read_input(path, "GPU inventory", 1_000_000)
    try:
        gpus = TypeAdapter(list[GPU]).validate_python(loads(raw, source))
    except (CrawdadError, ValueError) as e:  # a ValidationError and a UnicodeError are ValueErrors
        raise CrawdadError(
            f"{source}: not a GPU inventory ({str(e).splitlines()[0]}): write a JSON list of "
            '{"index": 0, "name": "H100", "memory_mib": 81559}'
        ) from None
    if len(gpus) > MAX_GPUS:
        raise CrawdadError(f"{source}: {len(gpus)} GPUs, more than {MAX_GPUS}")
    if len({g.index for g in gpus}) != len(gpus):
        raise CrawdadError(f"{source}: two GPUs have the same index")
    return sorted(gpus, key=lambda g: g.index)


def simulated(count: int, memory_gib: float, name: str | None = None) -> list[GPU]:
    """`count` identical GPUs of `memory_gib` each (`crawdad serve --gpus N --gpu-memory G`)."""
    if not (0 <= count <= MAX_GPUS and math.isfinite(memory_gib) and 0 < memory_gib <= MAX_GIB):
        raise CrawdadError(
            f"{count} GPUs of {memory_gib:g} GiB: plan for 0 to {MAX_GPUS} GPUs of at most "
            f"{MAX_GIB} GiB each"
        )
    name = name or f"{memory_gib:g} GiB GPU"
    return [GPU(index=i, name=name, memory_mib=int(memory_gib * 1024)) for i in range(count)]


def _nvml() -> list[GPU] | None:
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and kin
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(
                GPU(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_mib=int(total) // (1024 * 1024),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                )
            )
        return gpus
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvidia_smi() -> list[GPU] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return parse_smi(done.stdout)


def parse_smi(text: str) -> list[GPU]:
    """`nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        try:
            memory = int(float(fields[2]))
        except ValueError:
            continue
        uuid = fields[3] if len(fields) > 3 and fields[3] else None
        gpus.append(GPU(index=int(fields[0]), name=fields[1], memory_mib=memory, uuid=uuid))
    return gpus
