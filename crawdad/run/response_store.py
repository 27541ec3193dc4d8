"""An experiment's response store: identical requests are sent once.

A request's key is what determines its response: the backend kind, the model, the prompt, the
sampling settings, the seed, structured output, the options sent, and the stream guard's settings
(a loop check or time budget can end a response early). Not the URL: replicas of a model answer
alike. With seeds drawn from (run seed, question, round), a solo variant's first sample and a
debate's round 0 by the same model are one request, answered once.

`responses.jsonl` is append-only: one line per response, written as it arrives and fsynced with
the debates (a response lost in a crash is only asked again). A torn last line is set aside on
open. Only the index (key -> where its line is) lives in memory; a hit reads its line back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from crawdad.backends.base import ChatRequest, ChatResult
from crawdad.backends.schedule import CURRENT_DEBATE
from crawdad.records import Record
from crawdad.safe_files import Folder

log = logging.getLogger("crawdad")

RESPONSES = "responses.jsonl"
# Fields of a request that do not change its response.
NOT_IN_KEY = {"keep_alive", "stream", "timeout"}


class StoredResponse(Record):
    key: str
    result: ChatResult


def request_key(backend: str, request: ChatRequest, guard: str = "") -> str:
    # Requests without tools keep the keys they had before tools existed.
    unset = {f for f in ("messages", "tools") if getattr(request, f) is None}
    fields = request.model_dump(mode="json", exclude=NOT_IN_KEY | unset)
    payload = json.dumps([backend, fields, guard], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


class ResponseStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._index: dict[str, tuple[int, int]] = {}  # key -> (offset, length) in the file
        self._pending: dict[str, asyncio.Future[ChatResult]] = {}
        self._file: IO[bytes] | None = None
        self._reader: IO[bytes] | None = None
        self._end = 0
        self.hits = 0
        self.misses = 0

    # --- opening and closing ------------------------------------------------------------

    def open(self) -> ResponseStore:
        """Read the index and open the file for appending; inside its folder, never through a
        link (crawdad.safe_files)."""
        with Folder(self.path.parent) as folder:
            self._open_in(folder)
        return self

    def _open_in(self, folder: Folder) -> None:
        name = self.path.name
        good_end = 0
        if folder.is_file(name):
            with folder.open_read(name) as f:
                offset = 0
                for line in f:
                    start, offset = offset, offset + len(line)
                    if not line.endswith(b"\n"):
                        break
                    key = _key_of(line)
                    if key is not None:
                        self._index[key] = (start, len(line))
                        good_end = offset
                    elif line.strip():
                        log.warning(
                            "%s: a line at byte %d cannot be read; skipped", self.path, start
                        )
                        good_end = offset
                size = os.fstat(f.fileno()).st_size
            if good_end < size:
                self._set_aside_tail(folder, good_end)
        self._file = folder.open_append(name)
        self._reader = folder.open_read(name)
        self._end = self._file.seek(0, os.SEEK_END)

    def _set_aside_tail(self, folder: Folder, good_end: int) -> None:
        with folder.open_update(self.path.name) as f:
            f.seek(good_end)
            tail = f.read()
            with folder.open_append(self.path.with_suffix(".torn.jsonl").name) as side:
                side.write(tail if tail.endswith(b"\n") else tail + b"\n")
            f.truncate(good_end)
        log.warning("%s ended in a torn line; it was set aside and will be asked again", self.path)

    def sync(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        for handle in (self._file, self._reader):
            if handle is not None:
                handle.close()
        self._file = self._reader = None

    def __len__(self) -> int:
        return len(self._index)

    # --- use ----------------------------------------------------------------------------

    async def fetch(
        self, key: str, make: Callable[[], Awaitable[ChatResult]]
    ) -> tuple[ChatResult, bool]:
        """The stored response for `key`, or `make()`'s (stored). True when it was shared: made
        earlier, or in flight for another caller that this one waited for."""
        if key in self._index:
            self.hits += 1
            return self._read(key), True
        if key in self._pending:
            self.hits += 1
            return await asyncio.shield(self._pending[key]), True
        future: asyncio.Future[ChatResult] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            result = await make()
        except BaseException as e:
            del self._pending[key]
            # Waiters make the request themselves: the error may be this caller's alone.
            future.set_exception(_Retry(e))
            future.exception()  # marked retrieved: no warning when nobody waited
            raise
        self.misses += 1
        self._append(key, result)
        del self._pending[key]
        future.set_result(result)
        return result, False

    def _append(self, key: str, result: ChatResult) -> None:
        if self._file is None:
            raise RuntimeError("the response store is not open")
        line = StoredResponse(key=key, result=result).model_dump_json().encode() + b"\n"
        self._file.write(line)
        self._file.flush()
        self._index[key] = (self._end, len(line))
        self._end += len(line)

    def _read(self, key: str) -> ChatResult:
        assert self._reader is not None
        offset, length = self._index[key]
        line = os.pread(self._reader.fileno(), length, offset)
        return StoredResponse.model_validate_json(line).result


class _Retry(Exception):
    """The request a waiter waited for failed; the waiter asks again itself."""


def _key_of(line: bytes) -> str | None:
    try:
        return StoredResponse.model_validate_json(line).key
    except (ValidationError, ValueError):
        return None


class SharedPool:
    """A participant's view of a model pool through the response store: same interface as
    ModelPool's `chat`, and results say whether they were shared."""

    def __init__(self, pool: Any, store: ResponseStore, backend: str, guard: str) -> None:
        self.pool = pool
        self.store = store
        self.backend = backend
        self.guard = guard

    def __getattr__(self, name: str) -> Any:  # endpoints, retry, ...: the pool's own
        return getattr(self.pool, name)

    async def chat(self, request: ChatRequest, *args: Any, **kwargs: Any) -> ChatResult:
        key = request_key(self.backend, request, self.guard)
        while True:
            try:
                result, shared = await self.store.fetch(
                    key, lambda: self.pool.chat(request, *args, **kwargs)
                )
            except _Retry:
                continue
            if not shared:
                return result
            if (debate := CURRENT_DEBATE.get()) is not None:
                debate.steps += 1  # a step of its debate, as if the server had answered it
            return result.model_copy(update={"shared": True})

    async def aclose(self) -> None:
        await self.pool.aclose()
