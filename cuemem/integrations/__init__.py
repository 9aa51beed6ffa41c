"""Adapters that put cuemem's `Memory` behind other frameworks' memory interfaces.

Each adapter lives in its own module and imports its framework only there, so `import cuemem` never needs them:

- `cuemem.integrations.langgraph`: `CuememStore`, a LangGraph `BaseStore` (install the `langgraph` extra).
"""
