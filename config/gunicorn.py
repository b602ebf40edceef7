"""gunicorn settings: `gunicorn -c config/gunicorn.py config.wsgi`.

The access log keeps method, status, size and time but never a share-link token.
"""

import os

import gunicorn.http.wsgi
from gunicorn.glogging import Logger

from config.logging_filters import redact

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
timeout = 60
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
limit_request_line = 8190
limit_request_field_size = 8190
# "Server: gunicorn" tells a scanner which exploits to try; answer with the app's name instead
gunicorn.http.wsgi.SERVER = "headroom"


class RedactingLogger(Logger):
    def access(self, resp, req, environ, request_time):
        environ = dict(environ)
        environ["RAW_URI"] = redact(environ.get("RAW_URI", ""))
        environ["PATH_INFO"] = redact(environ.get("PATH_INFO", ""))
        req.uri = redact(getattr(req, "uri", "") or "")
        req.path = redact(getattr(req, "path", "") or "")
        super().access(resp, req, environ, request_time)


logger_class = RedactingLogger
