"""Writing a report folder: the one writer of every section's tables, figures and Markdown
(`ReportWriter`), the folder probed before any work, and a failed write (a full disk) turned into
a message that names the folder. Shared by the run report and the experiment report.

The writer is also the report's edge: whatever a section's text holds (a model name, an agent
name, a question id from a record or a server), it writes no raw HTML (`formatting.no_html`), no
link or image (`formatting.no_links`) and no table cell that changes its table
(`formatting.md_cell`, in `to_markdown`); the only HTML in report.md is the writer's own
`<details>`, the only links and images its own, to the report's files."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from crawdad.analysis.formatting import (
    details,
    link_list,
    md_cell,
    no_html,
    no_links,
    to_markdown,
)
from crawdad.analysis.report_progress import ReportProgress
from crawdad.analysis.section import Plot, Section, Table

from crawdad.errors import StoreError
from crawdad.run.store import make_writable_folder
from crawdad.safe_files import Folder, refuse_link


def _writable(out: Path) -> None:
    refuse_link(out)  # a report folder that is a link (RUN/report to elsewhere) is refused
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


def _text(markdown: str) -> str:
    """A section's Markdown as the writer writes it: no raw HTML, no link or image, one line
    where it must be one (headings, summaries: see the callers)."""
    return no_html(no_links(markdown))


COLLAPSE_ROWS = 24  # longer tables are folded in report.md

# A figure to draw: (the report folder, its figures/ folder in it, the Plot, the formats).
# Drawn after the Markdown, several at once.
_Job = tuple[Path, str, Plot, tuple[str, ...]]


def _draw(job: _Job) -> list[Path]:
    from crawdad.analysis.figures import save

    root, folder, plot, formats = job
    return save(plot.draw(*plot.args), root, folder, plot.name, formats)


class ReportWriter:
    """The one writer of a report folder: each section's tables and figures into its folder's
    `tables/` and `figures/`, and the Markdown that shows and links them. Every file is
    written inside the report folder, never through a link in it, and replaced atomically
    (crawdad.safe_files). `figures`: the formats of each figure ("png,pdf", the default, or
    "png"; None: the environment's CRAWDAD_FIGURES)."""

    def __init__(self, root: Path, figures: str | None = None) -> None:
        from crawdad.analysis.figures import figure_formats

        self.root = root
        self.formats = figure_formats(figures)
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
                out += [f"{'#' * level} {_text(' '.join(s.heading.splitlines()))}", ""]
            for b in s.blocks:
                if isinstance(b, Section):
                    out += self.markdown([b], level + 1 if s.heading else level, where)
                elif isinstance(b, Table):
                    out += self.table(where, b)
                elif isinstance(b, Plot):
                    out += self.plot(where, b)
                else:
                    out += [_text(b), ""]
        return out

    def table(self, folder: str, t: Table) -> list[str]:
        tdir = self.root / folder / "tables"
        if isinstance(t.shown, str):
            body = t.shown
        elif t.shown is not None:
            body = to_markdown(t.shown, formatted=True)
        else:
            body = to_markdown(t.df.drop(columns=list(t.hide), errors="ignore"))
        body = no_html(body)
        with Folder(self.root, *Path(folder).parts, "tables") as tables:
            tables.write_text(f"{t.name}.csv", t.df.to_csv(index=False))
            tables.write_text(f"{t.name}.md", body + "\n")
            for _, name, text in t.files:
                tables.write_text(name, text)
        if not t.show:
            return []
        links = [("CSV", f"{t.name}.csv"), *((label, name) for label, name, _ in t.files)]
        links += list(t.links)
        linked = link_list([(label, self.rel(tdir / f)) for label, f in links])
        title = f"**{_text(t.title)}.**" if t.title else ""
        lead = " ".join(x for x in (title, _text(t.line), no_html(linked)) if x)
        if t.fold == "always" or (t.fold == "long" and len(t.df) > COLLAPSE_ROWS):
            summary = " ".join(f"{t.title or t.name}: {len(t.df)} rows".splitlines())
            body = details(_text(summary), body)
        return [lead, "", body, ""]

    def plot(self, folder: str, p: Plot) -> list[str]:
        fdir = self.root / folder / "figures"
        self._jobs.append((self.root, (Path(folder) / "figures").as_posix(), p, self.formats))
        png = self.rel(fdir / f"{p.name}.png")
        caption = _text(" ".join(p.caption.splitlines()))
        alt = no_html(md_cell(p.caption))
        if "pdf" in self.formats:
            caption = f"[PDF]({self.rel(fdir / f'{p.name}.pdf')}) · {caption}"
        return [f"![{alt}]({png})", "", caption, ""]

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
        md = [*map(_text, head), *self.markdown(sections)]
        self.draw(workers, progress)
        with Folder(self.root) as root:
            return root.write_text("report.md", "\n".join(md))
