"""`crawdad serve --fetch CONFIG`: the served models' weights brought onto this machine (a
login node, where the internet is reachable) before a job whose compute nodes may have none:
Hugging Face ids downloaded with `huggingface_hub.snapshot_download` into the Hugging Face
cache (HF_HOME, which the nodes must share), Ollama tags pulled with `ollama pull` (into
OLLAMA_MODELS), GGUF files and local folders checked present."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawdad.config import RunConfig, ServeConfig
from crawdad.errors import CrawdadError

PULL_TIMEOUT = 6 * 3600  # seconds for `ollama pull` of one tag


def _snapshot_download() -> Callable[..., Any]:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CrawdadError(
            "downloading Hugging Face weights needs huggingface_hub: pip install huggingface_hub "
            "(or download them with `hf download ID` and give serve.weights the folder)"
        ) from None
    return snapshot_download  # type: ignore[no-any-return]


def _local(weights: str) -> bool:
    """A path rather than a Hugging Face id ("org/name")."""
    return weights.startswith(("/", ".", "~")) or weights.count("/") != 1 or Path(weights).exists()


def fetch_one(serve: ServeConfig, say: Callable[[str], None]) -> None:
    weights = serve.weights
    if serve.engine == "ollama":
        program = serve.executable or "ollama"
        say(f"ollama pull {weights}")
        try:
            done = subprocess.run(
                [program, "pull", weights],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=PULL_TIMEOUT,
            )
        except FileNotFoundError:
            raise CrawdadError(
                f"{program} is not installed here: install Ollama (ollama.com/download) to "
                f"pull {weights}"
            ) from None
        except subprocess.TimeoutExpired:
            raise CrawdadError(f"ollama pull {weights} took over {PULL_TIMEOUT} s") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise CrawdadError(
                f"ollama pull {weights} failed (exit {done.returncode}): "
                + " / ".join(tail)
                + " (is `ollama serve` running here?)"
            )
        return
    path = Path(weights).expanduser()
    if serve.engine == "llamacpp" or _local(weights):
        if not path.exists():
            raise CrawdadError(
                f"{weights}: not found; a {serve.engine} server reads it from disk, and the job's "
                "nodes must see it at this path"
            )
        say(f"{weights}: present")
        return
    download = _snapshot_download()
    say(f"downloading {weights} (Hugging Face)")
    try:
        where = download(repo_id=weights)
    except Exception as e:  # the hub's errors: a missing repo, a gated one, no network
        raise CrawdadError(f"downloading {weights} failed: {type(e).__name__}: {e}") from None
    say(f"{weights}: in {where}")


def fetch(configs: dict[str, RunConfig], say: Callable[[str], None]) -> int:
    """Every served model's weights, each once; the number fetched or checked."""
    from crawdad.serving.plan import served_places

    seen: set[tuple[str, str]] = set()
    for config in configs.values():
        for _place, spec in served_places(config):
            serve = spec.serve
            assert serve is not None
            if (serve.engine, serve.weights) in seen:
                continue
            seen.add((serve.engine, serve.weights))
            fetch_one(serve, say)
    return len(seen)
