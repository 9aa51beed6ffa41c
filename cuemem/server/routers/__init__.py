"""The REST API's routers, one per resource; `server/app.py` includes them in `ROUTERS` order."""
