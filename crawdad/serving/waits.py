"""Long waits a user can see: a server's start, a weights file hashed, doctor's slow checks.
On a terminal a bar shows the time waited and what is going on; without one (piped, or
`--no-progress`) a line every `STILL_EVERY` seconds says the same, so that no wait is silent."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

STILL_EVERY = 30.0  # seconds between lines while a wait lasts, without a bar


@contextlib.contextmanager
def heartbeat(
    what: Callable[[], str] | str, say: Callable[[str], None], every: float = STILL_EVERY
) -> Iterator[None]:
    """While the block runs, `say` "still WHAT: N s" every `every` seconds (from a thread of its
    own: the block may be a subprocess or a long read that never yields)."""
    done = threading.Event()
    began = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            said = what() if callable(what) else what
            say(f"still {said}: {time.monotonic() - began:.0f} s")

    thread = threading.Thread(target=beat, name="crawdad-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def size_text(n: float) -> str:
    """Bytes as a reader takes them in: "40.0 GB", "21 MB"."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


class BytesProgress:
    """The progress of reading `what` (a weights file hashed): a bar of bytes on a `terminal`,
    else a line when it begins (a file of `SAID_FROM` bytes or more) and every `every` seconds.
    Called as `progress(done, total)` from any thread."""

    SAID_FROM = 1e9  # bytes: a smaller file is read in a few seconds, and said nothing of

    def __init__(
        self,
        what: str,
        *,
        terminal: bool,
        say: Callable[[str], None],
        every: float = STILL_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.terminal, self.say, self.every, self.clock = (
            what,
            terminal,
            say,
            every,
            clock,
        )
        self._bar: Any = None
        self._began: float | None = None
        self._said = 0.0
        self._done = 0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self._began is None:
            self._began = self._said = now
            if self.terminal:
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=total, desc=self.what, unit="B", unit_scale=True, leave=False
                )
            elif total >= self.SAID_FROM:
                self.say(f"{self.what}: {size_text(total)} (once: the result is cached)")
        if self._bar is not None:
            self._bar.update(done - self._done)
        elif now - self._said >= self.every:
            self._said = now
            self.say(
                f"still {self.what}: {size_text(done)} of {size_text(total)}, "
                f"{now - self._began:.0f} s"
            )
        self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
