"""Writing a report folder: the one writer of every section's tables, figures and Markdown
(`ReportWriter`), the folder probed before any work, and a failed write (a full disk) turned into
a message that names the folder. Shared by the run report and the experiment report."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from crawdad.analysis.formatting import details, link_list, to_markdown
from crawdad.analysis.report_progress import ReportProgress
from crawdad.analysis.section import Plot, Section, Table

from crawdad.errors import StoreError
from crawdad.run.store import make_writable_folder


def _writable(out: Path) -> None:
    try:
        make_writable_folder(out)
    except OSError as e:
        raise StoreError(
            f"cannot write the report to {out}: {e.strerror or e}; choose another --out folder"
        ) from None


def write_into(out: Path, write: Callable[[], Path]) -> Path:
    """`write()` the report into `out` once `out` is known to take files; a write that fails
    on the way (a full disk) is a message naming the folder, not a traceback."""
    _writable(out)
    try:
        return write()
    except OSError as e:
        raise StoreError(
            f"writing the report to {out} failed: {e.strerror or e} "
            f"({getattr(e, 'filename', None) or 'a report file'}); free space or choose another "
            "--out folder"
        ) from None


COLLAPSE_ROWS = 24  # longer tables are folded in report.md

# A figure to draw: (its figures/ folder, the Plot). Drawn after the Markdown, several at once.
_Job = tuple[Path, Plot]


def _draw(job: _Job) -> list[Path]:
    from crawdad.analysis.figures import save

    folder, plot = job
    return save(plot.draw(*plot.args), folder, plot.name)


class ReportWriter:
    """The one writer of a report folder: each section's tables and figures into its folder's
    `tables/` and `figures/`, and the Markdown that shows and links them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._jobs: list[_Job] = []

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def markdown(self, sections: Iterable[Section], level: int = 2, folder: str = "") -> list[str]:
        """The Markdown of `sections` (headings at `level`); writes their tables and queues
        their figures (drawn by `draw`)."""
        out: list[str] = []
        for s in sections:
            where = s.folder if s.folder is not None else folder
            if s.heading:
                out += [f"{'#' * level} {s.heading}", ""]
            for b in s.blocks:
                if isinstance(b, Section):
                    out += self.markdown([b], level + 1 if s.heading else level, where)
                elif isinstance(b, Table):
                    out += self.table(where, b)
                elif isinstance(b, Plot):
                    out += self.plot(where, b)
                else:
                    out += [b, ""]
        return out

    def table(self, folder: str, t: Table) -> list[str]:
        tdir = self.root / folder / "tables"
        tdir.mkdir(parents=True, exist_ok=True)
        t.df.to_csv(tdir / f"{t.name}.csv", index=False)
        if isinstance(t.shown, str):
            body = t.shown
        elif t.shown is not None:
            body = to_markdown(t.shown, formatted=True)
        else:
            body = to_markdown(t.df.drop(columns=list(t.hide), errors="ignore"))
        (tdir / f"{t.name}.md").write_text(body + "\n")
        for _, name, text in t.files:
            (tdir / name).write_text(text)
        if not t.show:
            return []
        links = [("CSV", f"{t.name}.csv"), *((label, name) for label, name, _ in t.files)]
        links += list(t.links)
        linked = link_list([(label, self.rel(tdir / f)) for label, f in links])
        lead = " ".join(x for x in (f"**{t.title}.**" if t.title else "", t.line, linked) if x)
        if t.fold == "always" or (t.fold == "long" and len(t.df) > COLLAPSE_ROWS):
            body = details(f"{t.title or t.name}: {len(t.df)} rows", body)
        return [lead, "", body, ""]

    def plot(self, folder: str, p: Plot) -> list[str]:
        fdir = self.root / folder / "figures"
        self._jobs.append((fdir, p))
        png, pdf = self.rel(fdir / f"{p.name}.png"), self.rel(fdir / f"{p.name}.pdf")
        return [f"![{p.caption}]({png})", "", f"[PDF]({pdf}) · {p.caption}", ""]

    def draw(self, workers: int = 1, progress: ReportProgress | None = None) -> None:
        """Draw and save every queued figure; in `workers` processes when there are several."""
        jobs, self._jobs = self._jobs, []
        if progress is not None:
            progress.phase("drawing figures", len(jobs))
        if workers <= 1 or len(jobs) < 3:
            for job in jobs:
                _draw(job)
                if progress is not None:
                    progress.step()
            return
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(_draw, jobs):
                if progress is not None:
                    progress.step()

    def write(
        self,
        sections: Iterable[Section],
        workers: int = 1,
        head: Iterable[str] = (),
        progress: ReportProgress | None = None,
    ) -> Path:
        """report.md: `head` (Markdown lines), then the sections; every figure drawn."""
        if progress is not None:
            progress.phase("writing tables")
        md = [*head, *self.markdown(sections)]
        self.draw(workers, progress)
        path = self.root / "report.md"
        path.write_text("\n".join(md))
        return path
