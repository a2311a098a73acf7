"""The Jupyter server extension: wires settings, services and routes, nothing more."""

from __future__ import annotations

import gc
import os
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Unicode

from j2c_server.config import J2CSettings, load_settings
from j2c_server.core.version import __version__
from j2c_server.registry.archive import Compactor
from j2c_server.server.handlers import routes
from j2c_server.sweeps.hook import job_service


class J2CApp(ExtensionApp):
    name = "j2c_server"
    extension_url = "/j2c"
    load_other_extensions = True

    settings_overrides = Dict(
        default_value={},
        config=True,
        help="j2c settings (same keys as j2c.yaml), e.g. "
        "{'storage': {'url': 's3://bucket/prefix'}, 'scheduler': {'default': 'slurm'}}.",
    )
    freeze_startup_objects = Bool(
        True,
        config=True,
        help="Move every object alive once the server has started (modules, classes, config: "
        "hundreds of thousands) out of the garbage collector's reach (gc.freeze): with many "
        "jobs printing, each full collection otherwise walks them all, a pause of 0.2-0.5 s.",
    )
    config_file = Unicode(
        "", config=True, help="YAML file with j2c settings (default: $J2C_CONFIG or j2c.yaml)."
    )

    def initialize_settings(self) -> None:
        from pathlib import Path

        settings: J2CSettings = load_settings(
            config_file=Path(self.config_file) if self.config_file else None,
            overrides=dict(self.settings_overrides),
        )
        services: dict[str, Any] = {"j2c_settings": settings, "j2c_version": __version__}
        services.update(self._start_services(settings))
        self.settings.update(services)
        self.log.info(
            "j2c %s: storage %s, scheduler %s",
            __version__,
            settings.storage_url().split("://", 1)[0],
            settings.scheduler.default,
        )

    def _start_services(self, settings: J2CSettings) -> dict[str, Any]:
        """The job service (pipeline + registry) as a tornado setting for the handlers."""
        root_dir = self.serverapp.root_dir if self.serverapp is not None else None
        if root_dir:
            # Kernels inherit it: %j2c applies the same defaults rule as the Send form.
            os.environ.setdefault("J2C_SERVER_ROOT", os.path.abspath(root_dir))
        service = job_service(settings, root_dir=root_dir, log=self.log, frontend="rest")
        return {"j2c_service": service}

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the event loop runs: re-attach to the jobs a previous server left running."""
        service = self.settings["j2c_service"]
        service.start()
        # Finished jobs' events into their stored logs, off the loop (event_archive).
        self.settings["j2c_compactor"] = Compactor(
            service.registry.events, service.settings.registry, self.log
        )
        self.settings["j2c_compactor"].start()
        if self.freeze_startup_objects:
            # No collect first: that would block the loop a moment; what is garbage now is
            # little, and kept.
            gc.freeze()

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        compactor = self.settings.get("j2c_compactor")
        if compactor is not None:
            await compactor.stop()
        service = self.settings.get("j2c_service")
        if service is not None:
            await service.stop()
