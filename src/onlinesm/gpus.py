"""One GPU per worker: the devices to share, and the device each pytest-xdist worker takes.

What: :func:`visible_devices` lists the GPUs without initialising CUDA (the
``CUDA_VISIBLE_DEVICES`` variable, else ``nvidia-smi -L``, else none); :func:`device_for`
picks worker ``gwK``'s device round-robin; :func:`tx_specs` builds xdist's ``--tx`` specs
(``popen//env:CUDA_VISIBLE_DEVICES=1``), so each worker process starts with its GPU already
chosen; :func:`pin_worker` does the same from inside a worker started by plain ``pytest -n N``
(the plugin calls it in ``pytest_load_initial_conftests``, before any conftest, which may ask
torch about CUDA, is imported).

Why the environment: CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when torch first initialises
it; after that the variable changes nothing. The controller never initialises CUDA either, so
nothing here imports torch.

Example:
    >>> device_for("gw3", ["0", "1"])
    '1'
    >>> tx_specs(2, ["4", "5"])
    ['popen//env:CUDA_VISIBLE_DEVICES=4//env:ONLINESM_PINNED=1', 'popen//env:CUDA_VISIBLE_DEVICES=5//env:ONLINESM_PINNED=1']
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

__all__ = ["visible_devices", "device_for", "tx_specs", "pin_worker", "PINNED_ENV"]

#: Set in a worker whose device was chosen when it was started (by ``onlinesm check --workers``).
PINNED_ENV = "ONLINESM_PINNED"


def visible_devices(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs to share out: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``'s."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [m.group(1) for m in re.finditer(r"^GPU (\d+):", out, flags=re.M)]


def device_for(worker: str, devices: list[str]) -> str | None:
    """Worker ``gwK``'s device: ``devices[K % len(devices)]`` (None: no device or not a worker id)."""
    m = re.fullmatch(r"gw(\d+)", worker or "")
    if not devices or m is None:
        return None
    return devices[int(m.group(1)) % len(devices)]


def tx_specs(workers: int, devices: list[str]) -> list[str]:
    """xdist ``--tx`` specs for ``workers`` local processes, each with its GPU in its environment."""
    return [f"popen//env:CUDA_VISIBLE_DEVICES={device_for(f'gw{k}', devices)}//env:{PINNED_ENV}=1"
            for k in range(workers)]


def pin_worker() -> str | None:
    """In an xdist worker not pinned at start: set ``CUDA_VISIBLE_DEVICES`` to its GPU; the device."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or os.environ.get(PINNED_ENV):
        return None
    device = device_for(worker, visible_devices())
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
        os.environ[PINNED_ENV] = "1"
    return device
