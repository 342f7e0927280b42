"""Export and import of a tenant's memory: the service, its run over a file, and one module per
file format behind one interface (docs/import-export.md)."""

from app.services.transfer.format import Format
from app.services.transfer.formats import FORMATS, NAMES
from app.services.transfer.service import Transfer
from app.services.transfer.source import Source
from app.services.transfer.summary import ImportSummary, RefusedLine

__all__ = ["FORMATS", "NAMES", "Format", "ImportSummary", "RefusedLine", "Source", "Transfer"]
