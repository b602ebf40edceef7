"""Headroom settings, all from the environment.

Embedded default (nothing set): DEBUG on, a SQLite file in the project folder, Celery tasks run
in-process. Full stack: DATABASE_URL=postgres://user@host:port/name and
CELERY_BROKER_URL=redis://host:port/0.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set in the environment when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"  # noqa: S105
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "fleets",
    "pricing",
    "planner",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # static files from STATIC_ROOT under gunicorn (collectstatic fills it), compressed and
    # cached; in DEBUG, runserver's own static view answers as before
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.middleware.RequestGuardMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "config.wsgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {
            "default": dj_database_url.parse(
                # reuse connections for a minute, but test each before a request uses it, so
                # a PostgreSQL restart costs no request a 500 on a stale connection
                DATABASE_URL,
                conn_max_age=60,
                conn_health_checks=True,
            )
        }
    except Exception as exc:  # dj_database_url raises several types for a bad URL
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
else:
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "headroom.sqlite3"}
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_500_000  # bytes; a scenario or a benchmark upload is far smaller
# Any body declaring more than this is refused before it is read (uploads are 2 MB at most).
REQUEST_MAX_BYTES = int(os.environ.get("REQUEST_MAX_BYTES", "3000000"))

# Content-Security-Policy: scripts only from this site (every page's JS is a static file, no
# inline script); plotly sets inline styles and draws its modebar icons from data: URIs.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:", "blob:"],
    "font-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Celery: no broker configured -> run tasks eagerly in this process (embedded default).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
if not CELERY_BROKER_URL:
    # Never Celery's default amqp://localhost: a stray send must not reach some local broker.
    CELERY_BROKER_URL = "memory://"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "planner.api.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "planner.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "planner.api.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": os.environ.get("API_USER_RATE", "1200/min"),
        "anon": os.environ.get("API_ANON_RATE", "60/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Headroom API",
    "DESCRIPTION": "Cost-and-capacity planning for LLM inference fleets.",
    "VERSION": "1.0.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "PREPROCESSING_HOOKS": ["planner.api.schema.drop_duplicate_export_routes"],
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_share_tokens": {"()": "config.logging_filters.RedactShareTokens"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["redact_share_tokens"]},
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    "loggers": {
        # runserver's access log and request errors: same handler, so tokens are redacted
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.request": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}

# Caching (API throttles, sign-in throttling): shared through Redis when there is one, so
# every gunicorn worker counts the same attempts; per-process memory otherwise, and while that
# Redis is down (config.cache: the site keeps answering through a Redis outage).
CACHE_URL = os.environ.get("CACHE_URL") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
if CACHE_URL:
    CACHES["default"] = {
        "BACKEND": "config.cache.ResilientRedisCache",
        "LOCATION": CACHE_URL,
        "KEY_PREFIX": "headroom",
    }
# Sign-in throttling per (address, username): this many failures free, then a delay of
# LOGIN_DELAY_SECONDS doubling per failure up to LOGIN_LOCKOUT_SECONDS; one address may fail
# LOGIN_FAILURES_PER_ADDRESS times (over all usernames) per window (planner.auth_views).
LOGIN_FAILURES_ALLOWED = int(os.environ.get("LOGIN_FAILURES_ALLOWED", "5"))
LOGIN_DELAY_SECONDS = int(os.environ.get("LOGIN_DELAY_SECONDS", "30"))
LOGIN_LOCKOUT_SECONDS = int(os.environ.get("LOGIN_LOCKOUT_SECONDS", "900"))
LOGIN_FAILURES_PER_ADDRESS = int(os.environ.get("LOGIN_FAILURES_PER_ADDRESS", "100"))
API_TOKEN_REGENERATIONS_PER_HOUR = int(os.environ.get("API_TOKEN_REGENERATIONS_PER_HOUR", "10"))

if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # the container healthcheck speaks plain http
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# Sizing runs: candidates per Celery task, and when a silent run counts as stuck. The chain is
# vectorized over a batch and most of its cost is per numpy operation, not per row: the typical
# bench scenario's 180 candidates size in 0.54 s as one batch and 0.74 s as three of 64; the
# 1,470 of the sweep in 4.7 s as batches of 256 and 6.2 s as batches of 64 (one process).
SIZING_BATCH_SIZE = int(os.environ.get("SIZING_BATCH_SIZE", "256"))
RUN_STALE_SECONDS = int(os.environ.get("RUN_STALE_SECONDS", "120"))
# Backpressure: runs one user may have queued or running at once (more: 429, Retry-After).
RUNS_ACTIVE_PER_USER = int(os.environ.get("RUNS_ACTIVE_PER_USER", "5"))
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) and not CELERY_RESULT_BACKEND:
    # Only chord bookkeeping lives here (counts per batch); results are PostgreSQL rows.
    CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # A message unacked this long (its worker died) is delivered again to another worker.
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "300")),
    "socket_connect_timeout": 3,
    # How often a worker sweeps for such messages (about interval x throttle seconds).
    "unacked_restore_interval": int(os.environ.get("CELERY_UNACKED_RESTORE_INTERVAL", "10")),
    "unacked_restore_throttle": int(os.environ.get("CELERY_UNACKED_RESTORE_THROTTLE", "3")),
}
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "headroom")
# Beat's sweep has a queue of its own, so it never waits behind (or adds to) a backlog of
# sizing work; a worker started without -Q consumes both queues. A sweep not taken within
# its minute expires: the next one replaces it.
CELERY_SWEEP_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-sweep"
CELERY_TASK_QUEUES = [Queue(CELERY_TASK_DEFAULT_QUEUE), Queue(CELERY_SWEEP_QUEUE)]
CELERY_BEAT_SCHEDULE = {
    "requeue-stuck-runs": {
        "task": "planner.tasks.requeue_stuck_runs",
        "schedule": 60.0,
        "options": {"queue": CELERY_SWEEP_QUEUE, "expires": 55},
    },
}
# Simulate the leading candidates per GPU for p50/p95/p99 and size their replicas on the
# simulated SLO percentile (slower runs; the mean-value chain alone when off).
SIZING_SIMULATE_TAILS = env_bool("SIZING_SIMULATE_TAILS", True)
# Fault-injection only (tests that kill a worker mid-run): seconds to sleep in each batch.
SIZING_BATCH_DELAY_S = float(os.environ.get("SIZING_BATCH_DELAY_S", "0"))

# --------------------------------------------------------------------------- accounts
# Sign-up at /accounts/signup/: on by default while DEBUG is on (``make run``), off in
# production unless ALLOW_SIGNUP says otherwise. Password-reset mail goes to the console
# while DEBUG is on, unless an SMTP host is configured.
ALLOW_SIGNUP = env_bool("ALLOW_SIGNUP", DEBUG)
_email_host = os.environ.get("EMAIL_HOST", "")
_email_use_ssl = env_bool("EMAIL_USE_SSL", False)  # implicit TLS (port 465); else STARTTLS
if _email_host:
    _mailer = {
        "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "OPTIONS": {
            "host": _email_host,
            "port": int(os.environ.get("EMAIL_PORT", "465" if _email_use_ssl else "587")),
            "username": os.environ.get("EMAIL_HOST_USER", ""),
            "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
            "use_ssl": _email_use_ssl,
            "use_tls": env_bool("EMAIL_USE_TLS", not _email_use_ssl),
            "timeout": 10,
        },
    }
elif DEBUG:
    _mailer = {"BACKEND": "django.core.mail.backends.console.EmailBackend"}
else:  # production without EMAIL_HOST: the machine's own mail server (never the console)
    _mailer = {"BACKEND": "django.core.mail.backends.smtp.EmailBackend"}
MAILERS = {"default": _mailer}
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "headroom@localhost")
PASSWORD_RESET_TIMEOUT = int(os.environ.get("PASSWORD_RESET_TIMEOUT", "86400"))  # seconds

# --------------------------------------------------------------------------- embedded runs
# In-process tasks (no broker): a run started from the browser sizes in a background thread
# and the page polls its progress, as with workers (off: the request waits for the run).
SIZING_RUN_IN_BACKGROUND = env_bool("SIZING_RUN_IN_BACKGROUND", True)
