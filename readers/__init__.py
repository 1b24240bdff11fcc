"""SQL out to people: batch status, the dashboard views, exports and the dashboard page.

They only read: what the worker and the producer wrote, through the rollups and views.
"""
