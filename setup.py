"""What pyproject.toml cannot say on its own: the checkout keeps `analysis/`, `prompts/` and
`configs/` at its top level (the layout users know), and the wheel carries them inside the
`crawdad` package, so that site-packages gets `crawdad` and nothing else:

    analysis/  -> crawdad/analysis/            (the package crawdad.analysis)
    prompts/   -> crawdad/_bundled/prompts/    (found by crawdad.resources)
    configs/   -> crawdad/_bundled/configs/

An editable install (`pip install -e .`) copies nothing: crawdad.resources reads the checkout's
folders, and setuptools' editable finder maps crawdad.analysis to analysis/.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

BUNDLED = ("prompts", "configs")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for name in BUNDLED:
            self.copy_tree(name, str(Path(self.build_lib) / "crawdad" / "_bundled" / name))


def packages(top: str) -> list[str]:
    # Namespace discovery, so that data folders (crawdad/view/static) count as packages and
    # ship: every file git tracks inside a package does (include-package-data, setuptools-scm).
    return find_namespace_packages(include=[top, f"{top}.*"], exclude=["*.__pycache__"])


setup(
    packages=packages("crawdad") + ["crawdad." + p for p in packages("analysis")],
    package_dir={"crawdad.analysis": "analysis"},
    cmdclass={"build_py": BuildPy},
)
