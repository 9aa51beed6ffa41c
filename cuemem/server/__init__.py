"""cuemem served: the REST API with keys bound to namespaces, the MCP server and the memory browser page.

Thin layers over `Memory` (docs/design.md layout, `server/`): one process's loaded models and indexes are shared by
every request, and every library error keeps its message on the wire.
"""
