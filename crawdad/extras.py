"""What an optional extra of crawdad's package brings, and the message when it is missing; the
same for the analysis's scientific stack, which a light install (the GPU kit's wheels) lacks.

`causal-learn` (and the scientific stack it pulls in: scipy, scikit-learn, statsmodels...) is the
`discovery` extra: only causal discovery's algorithms, the independence tool and MAC's coding
agents import it, and a GPU machine that runs `crawdad bench` or the debates needs none of it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from crawdad.errors import CrawdadError

DISCOVERY = "discovery"
INSTALL = {DISCOVERY: "pip install 'crawdad[discovery]'"}


def require(module: str, extra: str = DISCOVERY, what: str = "causal discovery") -> ModuleType:
    """`module`, imported; a CrawdadError naming the install line when its extra is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is None or module.split(".")[0] != e.name.split(".")[0]:
            raise  # the extra is there but broken: a bug to see, not an install to suggest
        raise CrawdadError(
            f"{what} needs the '{extra}' extra ({e.name} is not installed): "
            f"{INSTALL[extra]}  (from a checkout: pip install -e '.[{extra}]')"
        ) from None


# The analysis (reports, figures, notebook frames, stopping decisions) and what it imports: the
# GPU kit (benchmarks/gpu/prepare.sh) leaves these out, since `crawdad bench` and the debates
# need none of them. Module -> the distribution that brings it.
ANALYSIS_STACK = {
    "pandas": "pandas",
    "numpy": "pandas",
    "matplotlib": "matplotlib",
    "tabulate": "tabulate",
    "jinja2": "jinja2",
    "markdown_it": "markdown-it-py",
    "vaderSentiment": "vaderSentiment",
}


def missing_analysis_stack(error: ModuleNotFoundError) -> str | None:
    """The message for a module of the analysis's stack that is not installed; None when the
    missing module is another (a bug to see, not an install to suggest)."""
    top = (error.name or "").split(".")[0]
    if top not in ANALYSIS_STACK:
        return None
    wanted = " ".join(sorted(set(ANALYSIS_STACK.values()), key=str.lower))
    return (
        f"this needs {top}, which is not installed here: crawdad's analysis (reports, figures, "
        f"stopping decisions) needs {', '.join(sorted(ANALYSIS_STACK, key=str.lower))}, which a "
        f"light install such as the GPU kit's leaves out. Install them: pip install {wanted}  "
        "(or pip install crawdad, with every dependency)"
    )
