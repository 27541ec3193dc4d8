"""The names `import crawdad` offers (issue 39): none is also a submodule's name (a submodule
import would replace it: `crawdad.run` became the package after `import crawdad.run.runner`),
and each is the object the API reference documents under it, callable where that is a function.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

import crawdad

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"


def _import_every_submodule() -> set[str]:
    """Every module under crawdad, imported (as a notebook's imports would), by its leaf names."""
    names = {"analysis"}  # crawdad.analysis: the checkout's analysis/ folder
    for info in pkgutil.walk_packages(crawdad.__path__, "crawdad."):
        if info.name.endswith("__main__"):  # runs the command line
            continue
        importlib.import_module(info.name)
        names.add(info.name.split(".")[1])
    return names


def _resolve(dotted: str) -> Any:
    """The object at `crawdad.notebook.run_sync`: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _documented() -> dict[str, Any]:
    """The API page's `::: path` entries under crawdad, by their last name."""
    paths = re.findall(r"^::: (crawdad\.[\w.]+)$", API_PAGE.read_text(), flags=re.M)
    return {p.rsplit(".", 1)[1]: _resolve(p) for p in paths}


def test_no_public_name_is_a_submodule_and_each_is_what_the_reference_documents() -> None:
    submodules = _import_every_submodule()
    exports = [n for n in crawdad.__all__ if n != "__version__"]
    assert not set(exports) & submodules, "a submodule import would replace these names"
    documented = _documented()
    for name in exports:
        value = getattr(crawdad, name)
        assert not inspect.ismodule(value), name
        assert name in documented, f"crawdad.{name} is not in docs/reference/api.md"
        assert value is documented[name], f"crawdad.{name} is not what the reference documents"
        if inspect.isfunction(documented[name]) or inspect.isclass(documented[name]):
            assert callable(value), name


def test_the_old_run_still_runs_for_one_release_with_a_warning() -> None:
    _import_every_submodule()  # crawdad.run is now the subpackage
    assert inspect.ismodule(crawdad.run)
    with pytest.warns(DeprecationWarning, match="crawdad.run_debates"):
        coro = crawdad.run(None, None, Path("nowhere"))  # type: ignore[operator]
    assert inspect.iscoroutine(coro) and coro.cr_code is crawdad.run_debates.__code__
    coro.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert inspect.iscoroutinefunction(crawdad.run_debates)
