"""`summarize dashboard`: a small read-only web page over the dashboard views.

`summarize/dashboard.py` is the click command (it imports Starlette and uvicorn only when run,
so `summarize submit` stays quick), `queries.py` the reads, `app.py` the Starlette
app and its JSON endpoints, `static/` the page with a vendored Chart.js (no CDN:
it works offline).
"""
