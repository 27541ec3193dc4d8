"""`crawdad view`: browse run folders and experiments in a local web app."""

from crawdad.view.index import RunIndex, open_sources
from crawdad.view.server import Server, Viewer

__all__ = ["RunIndex", "Server", "Viewer", "open_sources"]
