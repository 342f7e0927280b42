"""SQL for reading a relation's own values from its edge's agtype properties (edge alias `r`)."""

from __future__ import annotations

# The relation's type and id, as text; a unique index serves the id (migration 0003), and the
# (start, end, type) unique index the type (migration 0002).
REL_TYPE = "ag_catalog.agtype_access_operator(VARIADIC ARRAY[r.properties, '\"type\"'::ag_catalog.agtype])::text"
REL_ID = "ag_catalog.agtype_access_operator(VARIADIC ARRAY[r.properties, '\"id\"'::ag_catalog.agtype])::text"
