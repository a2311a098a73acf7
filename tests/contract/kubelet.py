"""A kubelet for the fake Kubernetes API server (``tests/support/fake_kube.py``), for the
behavioural contract: no real cluster can run here, so this thread plays the node.

It runs each new pod's container command on this machine (``j2c-unpack`` is this checkout's,
run by this interpreter), as the container would, with the pod's environment; the process's
output becomes the pod's log and its exit code the pod's end (Complete or Failed). When the
pod goes away (the Job was deleted: a cancel) the process gets SIGTERM, then SIGKILL after the
grace, as a kubelet does with ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.fake_kube import FakeKube

REPO = Path(__file__).resolve().parents[2]
UNPACK = [sys.executable, "-m", "j2c_server.unpack"]


class Kubelet:
    def __init__(self, fake: FakeKube, grace_s: float = 2.0) -> None:
        self._fake = fake
        self._grace_s = grace_s
        self._started: dict[str, subprocess.Popen[bytes]] = {}  # pod name → its process
        self._jobs: dict[str, str] = {}  # pod name → its Job's name
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _pods(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(pod, job, container) of every pod, read on the server's loop."""

        def read() -> list[tuple[str, str, dict[str, Any]]]:
            return [
                (name, pod["metadata"]["labels"]["job-name"], pod["spec"]["containers"][0])
                for (_, name), pod in self._fake.pods.items()
            ]

        return self._fake.call(read)

    def _from_secrets(self, container: dict[str, Any]) -> dict[str, str]:
        """The env entries a container takes from Secrets (``valueFrom.secretKeyRef``), as the
        kubelet resolves them when it starts the container."""

        def read() -> dict[str, str]:
            found = {}
            for item in container.get("env", []):
                ref = (item.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    secret = self._fake.secrets[("default", ref["name"])]
                    found[item["name"]] = secret["stringData"][ref["key"]]
            return found

        return self._fake.call(read)

    def _run(self, pod: str, job: str, container: dict[str, Any]) -> None:
        argv = [*container.get("command", []), *container.get("args", [])]
        if argv[0] == "j2c-unpack":
            argv = [*UNPACK, *argv[1:]]
        env = {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
        env.update(self._from_secrets(container))
        try:
            self._fake.start(job)
        except (StopIteration, KeyError):
            return  # deleted before it started
        process = subprocess.Popen(
            argv,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._started[pod] = process
        self._jobs[pod] = job
        assert process.stdout is not None
        for line in process.stdout:  # the pod's log, as the API serves it
            with contextlib.suppress(StopIteration, KeyError):  # the pod is gone: no log
                self._fake.log(job, line.decode(errors="replace").rstrip("\n"))
        code = process.wait()
        with contextlib.suppress(StopIteration, KeyError):
            self._fake.finish(job, 128 - code if code < 0 else code)

    def _stop_pod(self, pod: str) -> None:
        process = self._started[pod]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def _loop(self) -> None:
        while not self._stop.is_set():
            current = self._pods()
            for pod, job, container in current:
                if pod not in self._started:
                    self._started[pod] = None  # type: ignore[assignment]  # claimed
                    thread = threading.Thread(target=self._run, args=(pod, job, container))
                    thread.start()
                    self._threads.append(thread)
            alive = {pod for pod, _, _ in current}
            for pod, process in list(self._started.items()):
                if process is not None and pod not in alive and process.poll() is None:
                    self._stop_pod(pod)
            time.sleep(0.05)

    def shutdown(self) -> None:
        self._stop.set()
        for process in self._started.values():
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        for thread in self._threads:
            thread.join(10)


@contextlib.contextmanager
def running_kubelet(fake: FakeKube) -> Iterator[Kubelet]:
    kubelet = Kubelet(fake)
    thread = threading.Thread(target=kubelet._loop, name="fake-kubelet", daemon=True)
    thread.start()
    try:
        yield kubelet
    finally:
        kubelet.shutdown()
        thread.join(10)
