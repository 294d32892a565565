"""Shared test settings: onlinesm's own Hypothesis profiles and the GPU marker's skip."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from onlinesm import kernels

# --import-mode=importlib puts no test folder on sys.path: make the gallery importable.
sys.path.insert(0, str(Path(__file__).parent))

# Triton chooses compiled vs interpreted when a kernel is decorated, and triton.language
# decorates its own functions when first imported: choose before anything imports triton.
kernels.use_interpreter()

# Profiles are prefixed so they never collide with a user's own; CI picks the ci one.
settings.register_profile(
    "onlinesm-tests-dev", max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "onlinesm-tests-ci", max_examples=25, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("ONLINESM_TEST_PROFILE", "onlinesm-tests-ci" if os.environ.get("CI") else "onlinesm-tests-dev"))


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _interpreter_patches_once_per_launch():
    from onlinesm import interpreter_speed

    with interpreter_speed.patch_once_per_launch():
        yield
