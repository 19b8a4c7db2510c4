"""The deployment's pools as the scheduler sees them."""

from __future__ import annotations

from dataclasses import dataclass

from akka_training.config.devices import HostDevices
from akka_training.config.settings import Settings


@dataclass(frozen=True)
class PoolSpec:
    name: str
    accelerator: str
    declared: int
    max_claim: int
    host_ram_gib: float | None
    label: str


def pools_from_settings(settings: Settings, host: HostDevices) -> list[PoolSpec]:
    configured = settings.trainer.pools
    if configured is None:
        return [
            PoolSpec(
                name="default",
                accelerator=host.accelerator,
                declared=host.count,
                max_claim=host.count,
                host_ram_gib=host.host_ram_gib,
                label="default",
            )
        ]
    return [
        PoolSpec(
            name=p.name,
            accelerator=p.accelerator,
            declared=p.devices,
            max_claim=p.max_claim if p.max_claim is not None else p.devices,
            host_ram_gib=p.host_ram_gib,
            label=p.label or p.name,
        )
        for p in configured
    ]


def default_pool(settings: Settings, pools: list[PoolSpec]) -> str:
    return settings.trainer.default_pool or pools[0].name
