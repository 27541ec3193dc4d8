"""`crawdad data fetch`: download the official CLadder v1 zip and check it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
from tqdm.auto import tqdm

from crawdad.data.questions import load_cladder
from crawdad.errors import DataError
from crawdad.safe_files import Folder

DEFAULT_URL = "https://github.com/causalNLP/cladder/raw/main/data/cladder-v1.zip"
FILE_NAME = "cladder-v1.zip"


def fetch(dest: Path, url: str = DEFAULT_URL, timeout: float = 60.0) -> Path:
    """Download to dest/cladder-v1.zip (via a .part file), then load it to check it."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / FILE_NAME
    if target.exists():
        load_cladder(target)
        return target
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=timeout) as resp:
            resp.raise_for_status()
            total = int(resp.headers.get("content-length", 0)) or None
            digest = hashlib.sha256()
            with (  # written beside the target, renamed over it when whole (never via a link)
                Folder(dest) as folder,
                folder.replacing(FILE_NAME, binary=True) as f,
                tqdm(total=total, unit="B", unit_scale=True, desc=FILE_NAME) as bar,
            ):
                for chunk in resp.iter_bytes():
                    f.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except httpx.HTTPError as e:
        raise DataError(
            f"could not download CLadder from {url} ({type(e).__name__}: {e}). Without network, copy "
            f"the official cladder-v1.zip (from the CLadder repository, data/cladder-v1.zip) or its "
            f"Hugging Face files onto this machine and pass it with --data PATH, or put it at {target}."
        ) from None
    dataset = load_cladder(target)
    print(
        f"downloaded {target} (sha256 {digest.hexdigest()[:16]}), {dataset.info.n_total} questions"
    )
    return target
