"""drf-spectacular hooks."""


def drop_duplicate_export_routes(endpoints):
    """Document runs/{id}/export.csv (the file name) once, not also the router's slashed twin."""
    return [e for e in endpoints if not e[0].endswith((".csv/", ".xlsx/"))]
