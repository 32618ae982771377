"""``python -m backend.gateway [--listen HOST] [--port PORT]``: the SSH gateway."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    import django

    django.setup()
    from django.conf import settings

    from backend.accounts.host_key import load_host_key
    from backend.gateway.server import start_server

    parser = argparse.ArgumentParser(prog="python -m backend.gateway", description=__doc__)
    parser.add_argument("--listen", default=settings.TRAINYARD_SSH_LISTEN)
    parser.add_argument("--port", type=int, default=settings.TRAINYARD_SSH_PORT)
    args = parser.parse_args(argv)
    logger = logging.getLogger("backend.gateway")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def serve() -> None:
        key = load_host_key(settings.TRAINYARD_SSH_HOST_KEY)
        target = configured_target()
        server = await start_server(target, args.listen, args.port, key)
        endpoints = None
        if settings.TRAINYARD_ENDPOINTS_PORT:
            from backend.gateway.endpoints import start_endpoints

            endpoints = await start_endpoints(
                target, args.listen, settings.TRAINYARD_ENDPOINTS_PORT
            )
            logger.info(
                "Endpoint proxy on %s port %s", args.listen, settings.TRAINYARD_ENDPOINTS_PORT
            )
        logger.info(
            "SSH gateway on %s port %s, host key %s",
            args.listen, args.port, key.get_fingerprint("sha256"),
        )  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        server.close()
        await server.wait_closed()
        if endpoints is not None:
            await endpoints.cleanup()

    asyncio.run(serve())


def configured_target():
    """The target for TRAINYARD_BACKEND (chosen here, at the top: the targets sit below)."""
    from django.conf import settings

    from backend.clusters.backends import get_backend
    from backend.gateway.targets import LocalTarget, NoTarget
    from jobmanager.backends.local import LocalBackend
    from jobmanager.backends.slurm import SlurmBackend

    if settings.TRAINYARD_BACKEND == "kubernetes":
        from backend.gateway.kubernetes import KubernetesTarget
        from jobmanager.backends.kubernetes import api_client_from_config

        return KubernetesTarget(api_client_from_config(), settings.TRAINYARD_K8S_NAMESPACE)
    backend = get_backend()
    if isinstance(backend, LocalBackend):
        return LocalTarget(backend)
    if isinstance(backend, SlurmBackend):
        from backend.gateway.slurm import SlurmTarget

        return SlurmTarget(backend)
    return NoTarget(backend.name)


if __name__ == "__main__":
    main()
