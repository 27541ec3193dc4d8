"""What an optional extra of crawdad's package brings, and the message when it is missing.

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
