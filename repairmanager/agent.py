"""The node agent: a node's GPU health as Prometheus metrics, where dcgm-exporter is not deployed.

    python -m repairmanager.agent --node gpu-07 --port 9400
    python -m repairmanager.agent --node gpu-07 --port 9400 --declared-gpus 8 --faults f.json

It serves the values under the names NVIDIA's dcgm-exporter uses (labels ``gpu`` and
``Hostname``), plus ``trainyard_agent_gpus`` (the GPUs it sees) and
``trainyard_agent_heartbeat_timestamp_seconds``. With NVML (``nvidia-ml-py``) it reads
the GPUs; with ``--declared-gpus`` (machines without GPUs: tests, demos) it serves healthy
declared values. Either way a faults file, read at every scrape, overrides values:

    {"visible_gpus": 7, "gpus": {"3": {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1}}}

and may name the pod holding a GPU, as dcgm-exporter's Kubernetes mode labels its series
from the kubelet's pod-resources API (labels ``pod``, ``namespace``, ``container``):

    {"pods": {"4": {"pod": "ty-k3m9-1-0", "namespace": "trainyard-jobs", "container": "worker"}}}
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger("repairmanager.agent")

# Names and help as dcgm-exporter exports them (served as gauges, so that the names stay
# exactly these: prometheus-client would add ``_total`` to a counter's name).
GPU_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "Total number of single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "Total number of double-bit volatile ECC errors.",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Whether remapping of rows has failed.",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "Total number of NVLink CRC flit errors.",
}
POD_LABELS = ("pod", "namespace", "container")  # dcgm-exporter's, in Kubernetes mode
HEALTHY_DECLARED = {name: 0.0 for name in GPU_FIELDS} | {
    "DCGM_FI_DEV_GPU_TEMP": 40.0,
    "DCGM_FI_DEV_GPU_UTIL": 0.0,
}


class DeclaredGpus:
    """Healthy values for GPUs that are declared rather than discovered."""

    def __init__(self, count: int) -> None:
        self.count = count

    def read(self) -> dict[int, dict[str, float]]:
        return {index: dict(HEALTHY_DECLARED) for index in range(self.count)}


class NvmlGpus:
    """The GPUs NVML sees. A value NVML cannot give (unsupported) is left out."""

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()

    def read(self) -> dict[int, dict[str, float]]:
        nvml = self.nvml
        gpus: dict[int, dict[str, float]] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            readers: dict[str, Callable[[Any], float]] = {
                "DCGM_FI_DEV_GPU_TEMP": lambda h: nvml.nvmlDeviceGetTemperature(
                    h, nvml.NVML_TEMPERATURE_GPU
                ),
                "DCGM_FI_DEV_GPU_UTIL": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda h: nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC
                ),
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda h: nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                ),
                # (corrected, uncorrected, pending, failure)
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda h: nvml.nvmlDeviceGetRemappedRows(h)[3],
            }
            values: dict[str, float] = {"DCGM_FI_DEV_XID_ERRORS": 0.0}
            for name, read in readers.items():
                try:
                    values[name] = float(read(handle))
                except nvml.NVMLError:
                    continue
            gpus[index] = values
        return gpus


def read_faults(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {}
    try:
        faults = json.loads(path.read_text() or "{}")
    except ValueError:
        logger.warning("Faults file %s is not JSON; ignored.", path)
        return {}
    return faults if isinstance(faults, dict) else {}


class GpuHealthCollector(Collector):
    """Reads the GPUs (and the faults file) at every scrape."""

    def __init__(self, node: str, gpus: DeclaredGpus | NvmlGpus, faults: Path | None) -> None:
        self.node = node
        self.gpus = gpus
        self.faults = faults

    def collect(self) -> Iterator[GaugeMetricFamily]:
        faults = read_faults(self.faults)
        gpus = self.gpus.read()
        visible = faults.get("visible_gpus")
        if isinstance(visible, int):
            gpus = {index: values for index, values in gpus.items() if index < visible}
        for index, overrides in (faults.get("gpus") or {}).items():
            if str(index).isdigit() and int(index) in gpus and isinstance(overrides, dict):
                gpus[int(index)].update(
                    {k: float(v) for k, v in overrides.items() if k in GPU_FIELDS}
                )
        pods_held = faults.get("pods")
        pods: dict[str, Any] = pods_held if isinstance(pods_held, dict) else {}
        for name, help_text in GPU_FIELDS.items():
            family = GaugeMetricFamily(name, help_text, labels=["gpu", "Hostname", *POD_LABELS])
            for index, values in sorted(gpus.items()):
                held = pods.get(str(index))
                holder: dict[str, Any] = held if isinstance(held, dict) else {}
                if name in values:
                    held_by = [str(holder.get(label, "")) for label in POD_LABELS]
                    family.add_metric([str(index), self.node, *held_by], values[name])
            yield family
        seen = GaugeMetricFamily(
            "trainyard_agent_gpus", "GPUs the agent sees.", labels=["Hostname"]
        )
        seen.add_metric([self.node], len(gpus))
        yield seen
        beat = GaugeMetricFamily(
            "trainyard_agent_heartbeat_timestamp_seconds",
            "When the agent last read the node (Unix time).",
            labels=["Hostname"],
        )
        beat.add_metric([self.node], time.time())
        yield beat


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m repairmanager.agent", description=__doc__)
    parser.add_argument("--node", required=True, help="this node's name in Trainyard")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--address", default="0.0.0.0")
    parser.add_argument("--declared-gpus", type=int, help="serve this many healthy GPUs")
    parser.add_argument("--faults", type=Path, help="JSON file of injected faults")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.declared_gpus is not None:
        gpus: DeclaredGpus | NvmlGpus = DeclaredGpus(args.declared_gpus)
    else:
        try:
            gpus = NvmlGpus()
        except Exception as error:  # no driver, no GPU: pynvml raises its own NVMLError
            parser.exit(2, f"NVML is not available ({error}); on a machine without GPUs "
                        "give --declared-gpus N.\n")  # fmt: skip
    REGISTRY.register(GpuHealthCollector(args.node, gpus, args.faults))
    server, thread = start_http_server(args.port, addr=args.address)
    logger.info("Serving GPU health of %s on %s:%d", args.node, args.address, args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    thread.join(timeout=5)


if __name__ == "__main__":
    main()
