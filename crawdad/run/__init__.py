"""The run machinery: many debates at once (`runner`), watching the servers (`watch`), the run
folder (`store`), an experiment's shared responses (`response_store`), and experiment files and
their runs (`experiment`). The order requests wait in for a server is the backends' job
(`crawdad.backends.schedule`)."""

import sys
import types
import warnings
from typing import Any


class _CallableForOneRelease(types.ModuleType):
    """`crawdad.run(config, dataset, out)` was the function now named `crawdad.run_debates`.
    The subpackage owns the attribute `crawdad.run` as soon as any of its modules is imported, so
    the name cannot stay a function; calling the package still works, with a warning, for one
    release (then this class goes)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            "crawdad.run(...) is now crawdad.run_debates(...) (crawdad.run is the subpackage); "
            "the old call goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        from crawdad.run.runner import run_debates

        return run_debates(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableForOneRelease
